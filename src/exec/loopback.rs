//! Loopback-only network for confined commands: `capabilities.network.allow` listing
//! only loopback names (`localhost`, `127.0.0.1`, `::1`, `127.x.y.z`).
//!
//! Landlock (ABI ≥ 4) refuses every TCP `connect` and `bind` the command makes itself,
//! and the seccomp filter refuses every IP socket but TCP ([`super::sandbox`]). One more
//! seccomp filter turns `connect(2)` and `bind(2)` into user notifications that `mur`
//! answers on a thread of its own per command ([`Pending::start`]):
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
use std::os::unix::net::UnixDatagram;

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

/// What the child needs to hand its listener to `mur`: the socket and a message
/// buffer prepared before the fork (the child only writes the fd number into it).
pub struct Handoff {
    child_end: UnixDatagram,
    buf: Box<MsgBuf>,
}

#[repr(C)]
struct MsgBuf {
    msg: libc::msghdr,
    iov: libc::iovec,
    byte: u8,
    // Room for one SCM_RIGHTS control message holding one int, aligned for cmsghdr.
    cmsg: [u64; 4],
}

/// The parent's side until the child has started.
pub struct Pending {
    parent_end: UnixDatagram,
}

/// A pair of handoff ends.
///
/// Errors: the socket pair cannot be created.
pub fn handoff() -> io::Result<(Handoff, Pending)> {
    let (a, b) = UnixDatagram::pair()?;
    // SAFETY: all-zero is a valid value for these C structs.
    let mut buf: Box<MsgBuf> = Box::new(unsafe { std::mem::zeroed() });
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    if space > std::mem::size_of::<[u64; 4]>() {
        return Err(io::Error::other(
            "the control message does not fit its buffer",
        ));
    }
    buf.iov.iov_base = (&mut buf.byte) as *mut u8 as *mut libc::c_void;
    buf.iov.iov_len = 1;
    buf.msg.msg_iov = &mut buf.iov;
    buf.msg.msg_iovlen = 1;
    buf.msg.msg_control = buf.cmsg.as_mut_ptr() as *mut libc::c_void;
    buf.msg.msg_controllen = space as _;
    // SAFETY: the control buffer is large enough for one header (checked above).
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&buf.msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
    }
    Ok((Handoff { child_end: b, buf }, Pending { parent_end: a }))
}

impl Handoff {
    /// In the child, between fork and exec: installs `filter` with a new listener and
    /// sends the listener to the parent. Async-signal-safe: raw system calls on
    /// memory prepared before the fork.
    ///
    /// # Safety
    ///
    /// Only to be called in the child of a fork, with `prog` pointing at a live
    /// program.
    pub unsafe fn send_listener(&mut self, prog: *const libc::sock_fprog) -> io::Result<()> {
        // SAFETY: raw system calls; the buffers live in this struct.
        unsafe {
            let lfd = libc::syscall(
                libc::SYS_seccomp,
                1u32, // SECCOMP_SET_MODE_FILTER
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32,
                prog,
            );
            if lfd < 0 {
                return Err(io::Error::last_os_error());
            }
            let lfd = lfd as libc::c_int;
            let c = libc::CMSG_FIRSTHDR(&self.buf.msg);
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut libc::c_int, lfd);
            let r = libc::sendmsg(self.child_end.as_raw_fd(), &self.buf.msg, 0);
            let err = io::Error::last_os_error();
            libc::close(lfd);
            if r < 0 {
                return Err(err);
            }
        }
        Ok(())
    }
}

// SAFETY: the raw pointers in MsgBuf point into the same heap allocation, which moves
// with the Box (its address does not change).
unsafe impl Send for Handoff {}
unsafe impl Sync for Handoff {}

impl Pending {
    /// After the spawn: receives the command's listener and starts the thread that
    /// answers its `connect` and `bind` calls until the command and everything it
    /// started are gone.
    ///
    /// Errors: no listener arrived, or the thread cannot be started.
    pub fn start(self) -> io::Result<()> {
        self.parent_end.set_nonblocking(true)?;
        // SAFETY: all-zero is a valid value for these C structs.
        let mut byte = 0u8;
        let mut iov = libc::iovec {
            iov_base: (&mut byte) as *mut u8 as *mut libc::c_void,
            iov_len: 1,
        };
        let mut cmsg = [0u64; 4];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cmsg) as _;
        // SAFETY: recvmsg into buffers that live on this stack.
        let r = unsafe {
            libc::recvmsg(
                self.parent_end.as_raw_fd(),
                &mut msg,
                libc::MSG_CMSG_CLOEXEC,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel filled msg's control buffer.
        let fd = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            if c.is_null() || (*c).cmsg_type != libc::SCM_RIGHTS {
                return Err(io::Error::other(
                    "no seccomp listener came from the command",
                ));
            }
            std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int)
        };
        // SAFETY: the fd just arrived and is ours.
        let listener = unsafe { OwnedFd::from_raw_fd(fd) };
        std::thread::Builder::new()
            .name("netguard".into())
            .stack_size(64 * 1024)
            .spawn(move || serve(listener))?;
        Ok(())
    }
}

/// Answers notifications until the listener hangs up (no process uses the filter).
fn serve(listener: OwnedFd) {
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
