//! The Confluent wire format: a record's bytes are the magic byte `0`, the schema's id as a
//! 4-byte big-endian integer, then the payload in the schema's encoding (for Protobuf, a list
//! of message indexes comes first). Kafka Streams', Flink's and Spark's Confluent serdes all
//! read and write this.

/// The first byte of every framed record.
pub const MAGIC: u8 = 0;
/// The magic byte and the id.
pub const HEADER_LEN: usize = 5;

/// Why bytes are not a framed record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0} bytes: too short for the wire format's 5-byte header (magic byte 0, schema id)")]
    Short(usize),
    #[error("magic byte {0:#04x}, not 0x00: not in the Confluent wire format")]
    Magic(u8),
}

/// The schema id and the payload of a framed record.
pub fn unframe(bytes: &[u8]) -> Result<(u32, &[u8]), WireError> {
    let Some((head, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Short(bytes.len()));
    };
    if head[0] != MAGIC {
        return Err(WireError::Magic(head[0]));
    }
    Ok((u32::from_be_bytes([head[1], head[2], head[3], head[4]]), payload))
}

/// Appends the header for schema `id` to `out`.
pub fn frame(id: u32, out: &mut Vec<u8>) {
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn framing_round_trips_and_bad_headers_are_named() {
        let mut v = Vec::new();
        frame(7, &mut v);
        v.extend_from_slice(b"payload");
        assert_eq!(unframe(&v), Ok((7, &b"payload"[..])));
        assert_eq!(unframe(&[0, 0, 0]), Err(WireError::Short(3)));
        assert_eq!(unframe(b"{\"a\":1}"), Err(WireError::Magic(b'{')));
    }

    proptest! {
        /// Any bytes at all are either a header and a payload or an error; nothing panics.
        #[test]
        fn any_bytes_unframe_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match unframe(&bytes) {
                Ok((id, payload)) => {
                    prop_assert_eq!(bytes[0], MAGIC);
                    prop_assert_eq!(id.to_be_bytes(), [bytes[1], bytes[2], bytes[3], bytes[4]]);
                    prop_assert_eq!(payload, &bytes[5..]);
                }
                Err(_) => prop_assert!(bytes.len() < HEADER_LEN || bytes[0] != MAGIC),
            }
        }
    }
}
