//! The spec's reserved names: the ground floor holds them, since the manifest checks
//! them (ARCHITECTURE.md, "Layers").

/// The eleven reserved runtime-provided tool names (spec, "Reserved names"). A declared
/// artifact whose bare name is one of these is refused with E-CAP-013.
pub const RESERVED: [&str; 11] = [
    "share-file",
    "fetch-peer-file",
    "delegate-task",
    "submit-plan",
    "switch-driver",
    "call-member",
    "end-without-answer",
    "pull-artifact",
    "remove-artifact",
    "session-status",
    "background-command",
];
