//! The registration exchange on the double's connector port, shared by the edge and the
//! connector stand-in.
//!
//! The stand-in dials the port and writes one JSON line, [`Register`]; the double answers one JSON
//! line, [`Registered`]. On success the connection turns into HTTP/2 with the double as the client
//! (it sends visitors' requests) and the stand-in as the server. Each request carries the ingress
//! rule's service in [`SERVICE_HEADER`], which the edge always sets itself.
//!
//! Real cloudflared registers over QUIC or HTTP/2 with a Cap'n Proto RPC (`RegisterConnection`
//! carrying the account tag, tunnel ID and secret); this keeps the same content and outcomes.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Header carrying the ingress rule's `service` from the edge to the connector.
pub const SERVICE_HEADER: &str = "cf-double-service";

/// Longest registration line either side reads.
const MAX_LINE: usize = 16 * 1024;

/// The stand-in's registration.
#[derive(Serialize, Deserialize)]
pub struct Register {
    /// The connector token as given to `cloudflared tunnel run --token`.
    pub token: String,
    /// The connector's own UUID (cloudflared's `connector ID`).
    pub connector_id: String,
}

/// The double's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Registered {
    /// Accepted.
    pub ok: bool,
    /// The connection's ID when accepted.
    #[serde(default)]
    pub connection_id: Option<String>,
    /// Why it was refused, in the edge's words (`Unauthorized: Invalid tunnel secret`).
    #[serde(default)]
    pub error: Option<String>,
}

/// Reads one `\n`-terminated line byte by byte, so nothing of the HTTP/2 stream that follows
/// it is consumed.
pub async fn read_line<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        let byte = r.read_u8().await?;
        if byte == b'\n' {
            return Ok(line);
        }
        if line.len() >= MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "registration line too long",
            ));
        }
        line.push(byte);
    }
}

/// Writes `value` as one JSON line.
pub async fn write_line<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    w.write_all(&bytes).await?;
    w.flush().await
}
