//! A network peer of `fleet serve`'s listeners, as the hostile tests play one: connections from a
//! chosen loopback address (the listeners count by peer address, and the whole of 127/8 is this
//! machine), and how long until the server closes one.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A connection to `addr` from the loopback address 127.0.0.`host`.
pub fn connect_from(addr: &str, host: u8) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, host], 0)).into())
        .unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// How long until the server closes `s` (it reads the end, or a reset), within `bound`.
pub fn closed_within(mut s: TcpStream, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < bound {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}
