//! What the socket threads (acceptor, dialers, readers, writers and the
//! [`super::preauth`] thread) hand the machine's loop. A leaf, so the
//! threads and the loop that owns them do not import each other.

use std::net::{SocketAddr, TcpStream};

use nagare_proto::tree::{DialId, LinkId, LinkInput, Role};

pub(super) enum Arrival {
    Accepted(TcpStream, SocketAddr),
    Dialed(DialId, Role, std::io::Result<TcpStream>),
    /// A newcomer's first message, read by [`super::preauth`], with its socket.
    First(LinkId, Vec<u8>, TcpStream),
    Link(LinkInput),
}
