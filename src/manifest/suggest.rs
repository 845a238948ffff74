//! "Did you mean" for misspelt keys and values.

/// The lowest Jaro-Winkler similarity (0 to 1, case-folded) at which a known word is
/// offered as the likely intent.
const THRESHOLD: f64 = 0.8;

/// The known word nearest to `word`, if one is close enough to suggest.
///
/// Similarity is Jaro-Winkler on lowercased text; ties go to the earlier word of `known`.
pub fn nearest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let word = word.to_lowercase();
    let mut best: Option<(&str, f64)> = None;
    for &k in known {
        let score = strsim::jaro_winkler(&word, &k.to_lowercase());
        if score >= THRESHOLD && best.is_none_or(|(_, s)| score > s) {
            best = Some((k, score));
        }
    }
    best.map(|(k, _)| k)
}

/// `` `a`, `b`, `c` ``: a list of known words for a message.
pub fn list(known: &[&str]) -> String {
    known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The hint appended to an "unknown key" message: the nearest key of this level, else
/// the level(s) where the key does belong, else the keys of this level.
pub fn key_hint(key: &str, known: &'static [&'static str]) -> String {
    if nearest(key, known).is_none() {
        let homes = crate::manifest::keys::homes_of(key, known);
        if !homes.is_empty() {
            let homes: Vec<String> = homes
                .iter()
                .map(|h| {
                    if h.is_empty() {
                        "the top level".to_string()
                    } else {
                        format!("`{h}`")
                    }
                })
                .collect();
            return format!(" (`{key}` belongs under {})", homes.join(" or "));
        }
    }
    hint(key, known)
}

/// The parenthesised hint appended to "unknown ..." messages: the nearest known word,
/// or every known word, or that nothing is accepted at all.
pub fn hint(word: &str, known: &[&str]) -> String {
    match nearest(word, known) {
        Some(k) => format!(" (did you mean `{k}`?)"),
        None if known.is_empty() => " (nothing is accepted here)".to_string(),
        None => format!(" (expected one of {})", list(known)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_words_are_suggested() {
        assert_eq!(nearest("shel", &["shell", "spawn", "plan"]), Some("shell"));
        assert_eq!(
            nearest(
                "shell_grace_sec",
                &["shell_grace_secs", "deadline_notice_secs"]
            ),
            Some("shell_grace_secs")
        );
        assert_eq!(nearest("Name", &["name", "description"]), Some("name"));
        assert_eq!(
            nearest("opanai", &["openai", "anthropic", "script"]),
            Some("openai")
        );
    }

    #[test]
    fn distant_words_are_not() {
        assert_eq!(nearest("frobnicate", &["shell", "spawn", "plan"]), None);
        assert_eq!(hint("zzz", &["a", "b"]), " (expected one of `a`, `b`)");
        assert_eq!(hint("zzz", &[]), " (nothing is accepted here)");
    }
}
