//! Loopback-only network for confined commands: `capabilities.network.allow` listing
//! only loopback names (`localhost`, `127.0.0.1`, `::1`, `127.x.y.z`).
//!
//! Landlock (ABI ≥ 4) refuses every TCP `connect` and `bind` the command makes itself,
//! and the seccomp filter refuses every IP socket but TCP ([`super::sandbox`]). One more
//! seccomp filter, installed on the session's launcher thread and so inherited by every
//! command it starts, turns `connect(2)` and `bind(2)` into user notifications that
//! `mur` answers on one unconfined thread per session ([`serve`]):
//!
//! - an IPv4 address in 127.0.0.0/8, or IPv6 `::1` or `::ffff:127.x.y.z`: `mur` takes a
//!   duplicate of the command's socket (`pidfd_getfd`) and makes the `connect` or
//!   `bind` itself, with its own copy of the address, then hands the result back
//!   (`0`, `EINPROGRESS` for a non-blocking socket, `ECONNREFUSED`…). The command's
//!   memory is read once; changing it afterwards changes nothing, since the kernel
//!   never reads it again;
//! - any other IPv4 or IPv6 address: `EACCES`;
//! - another family (a unix socket, `AF_UNSPEC`): the call goes on in the kernel,
//!   under the command's own rules (if its memory is changed to an IP address in the
//!   meantime, Landlock refuses it, as it refuses every TCP connect of the command).
//!
//! A TCP Fast Open `sendto`/`sendmsg` (which connects without `connect(2)`) is refused
//! by the seccomp filter.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Whether `host` (an entry of `capabilities.network.allow`) names the loopback.
pub fn is_loopback_name(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h == "::1"
        || h.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

/// The audit architecture of this build, for the notify filter's check.
fn audit_arch() -> Option<u32> {
    match std::env::consts::ARCH {
        "x86_64" => Some(0xC000_003E),
        "aarch64" => Some(0xC000_00B7),
        "riscv64" => Some(0xC000_00F3),
        _ => None,
    }
}

/// The notify filter: `connect` and `bind` go to `mur`, everything else is allowed (by
/// this filter; the others still apply).
pub fn notify_filter() -> Option<Vec<libc::sock_filter>> {
    let arch = audit_arch()?;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret: u32 = libc::BPF_RET | libc::BPF_K;
    Some(vec![
        stmt(ld, 4), // seccomp_data.arch
        jeq(arch, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(ld, 0), // seccomp_data.nr
        jeq(libc::SYS_connect as u32, 1, 0),
        jeq(libc::SYS_bind as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_USER_NOTIF),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ])
}

/// Answers the notifications of `listener` until it hangs up (no thread or process
/// uses the filter any more: the launcher thread and every command it started are
/// gone).
pub fn serve(listener: OwnedFd) {
    let lfd = listener.as_raw_fd();
    loop {
        let mut p = libc::pollfd {
            fd: lfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        let r = unsafe { libc::poll(&mut p, 1, -1) };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if p.revents & libc::POLLIN == 0 {
            return; // POLLHUP: every process of the command has exited.
        }
        // SAFETY: all-zero is how the kernel wants the request buffer.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl fills `req`.
        if unsafe { libc::ioctl(lfd, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut req) } != 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) | Some(libc::ENOENT) => continue,
                _ => return,
            }
        }
        let (error, flags) = decide(lfd, &req);
        let resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error,
            flags,
        };
        // SAFETY: the ioctl reads `resp`; ENOENT (the caller is gone) is ignored.
        unsafe { libc::ioctl(lfd, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &resp) };
    }
}

/// The answer to one `connect`/`bind`: (negated errno or 0, flags).
fn decide(lfd: RawFd, req: &libc::seccomp_notif) -> (i32, u32) {
    let args = req.data.args;
    let mut addr = [0u8; 128];
    let len = (args[2] as usize).min(addr.len());
    let local = libc::iovec {
        iov_base: addr.as_mut_ptr() as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: args[1] as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: reads at most `len` bytes into `addr`.
    let n = unsafe { libc::process_vm_readv(req.pid as i32, &local, 1, &remote, 1, 0) };
    // The request must still be live for what was read to be the caller's.
    // SAFETY: the ioctl reads the id.
    let valid = unsafe { libc::ioctl(lfd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &req.id) } == 0;
    if !valid {
        return (-libc::ENOENT, 0);
    }
    if n < 2 {
        return (-libc::EFAULT, 0);
    }
    let n = n as usize;
    let family = u16::from_ne_bytes([addr[0], addr[1]]) as i32;
    let loopback = match family {
        libc::AF_INET if n >= 8 => addr[4] == 127,
        libc::AF_INET6 if n >= 24 => {
            let a = &addr[8..24];
            let one = a[..15].iter().all(|b| *b == 0) && a[15] == 1;
            let mapped =
                a[..10].iter().all(|b| *b == 0) && a[10] == 0xff && a[11] == 0xff && a[12] == 127;
            one || mapped
        }
        libc::AF_INET | libc::AF_INET6 => return (-libc::EINVAL, 0),
        _ => return (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
    };
    if !loopback {
        return (-libc::EACCES, 0);
    }
    match on_behalf(req, &addr[..n]) {
        Ok(()) => (0, 0),
        Err(e) => (-(e.raw_os_error().unwrap_or(libc::EACCES)), 0),
    }
}

/// Makes the caller's `connect` or `bind` on a duplicate of its socket, with `addr`.
fn on_behalf(req: &libc::seccomp_notif, addr: &[u8]) -> io::Result<()> {
    let pid = req.pid as libc::pid_t;
    // SAFETY: pidfd_open returns a new fd or -1. The caller may be a thread other than
    // the leader: PIDFD_THREAD (O_EXCL) names a thread on kernels that have it.
    let mut pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if pidfd < 0 {
        pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::O_EXCL as u32) };
    }
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is new and ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd(),
            req.data.args[0] as libc::c_int,
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is new and ours.
    let sock = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let sa = addr.as_ptr() as *const libc::sockaddr;
    let len = addr.len() as libc::socklen_t;
    // SAFETY: `addr` holds `len` bytes copied from the caller.
    let r = unsafe {
        if req.data.nr == libc::SYS_connect as i32 {
            libc::connect(sock.as_raw_fd(), sa, len)
        } else {
            libc::bind(sock.as_raw_fd(), sa, len)
        }
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for h in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback_name(h), "{h}");
        }
        for h in [
            "example.com",
            "10.0.0.1",
            "0.0.0.0",
            "localhost.example.com",
        ] {
            assert!(!is_loopback_name(h), "{h}");
        }
    }
}
