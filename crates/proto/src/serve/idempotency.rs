//! Idempotency keys of push requests: a client that lost the answer to
//! `POST /v1/streams` (a timeout, a dropped connection) sends the same
//! request again with the same key and gets the stream the first one
//! made, instead of a second stream sending beside it. `nagare cluster`
//! keys every leg with its label and epoch frame.

use super::Error;

/// Longest key taken: a label and a frame number fit many times over, and
/// the table compares every key on each keyed request.
pub const MAX_KEY_LEN: usize = 200;

/// What a keyed request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// No stream has the key: start one.
    New,
    /// Stream `id` was made by the same request: answer with it.
    Existing(u64),
}

/// Checks a key: 1 to [`MAX_KEY_LEN`] bytes of printable ASCII, so it
/// shows in logs and stream lists as sent.
pub fn check_key(key: &str) -> Result<(), Error> {
    let printable = key.bytes().all(|b| (0x20..0x7f).contains(&b));
    if key.is_empty() || key.len() > MAX_KEY_LEN || !printable {
        return Err(Error::BadKey {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

/// What a request `asked` with `key` does, given every keyed stream of
/// the table as (id, key, the request that made it): the stream with the
/// key if the same request made it, a refusal if another request did (a
/// client reusing a key for something else would otherwise get a stream
/// it did not ask for), else a new stream.
pub fn replay<'a, R: PartialEq + 'a>(
    key: &str,
    asked: &R,
    table: impl IntoIterator<Item = (u64, &'a str, &'a R)>,
) -> Result<Replay, Error> {
    check_key(key)?;
    match table.into_iter().find(|(_, k, _)| *k == key) {
        None => Ok(Replay::New),
        Some((id, _, made)) if made == asked => Ok(Replay::Existing(id)),
        Some((id, _, _)) => Err(Error::KeyReused {
            key: key.to_string(),
            id,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_replays_its_own_request_and_refuses_another() {
        let table = [
            (3, "wall/stripe 0@100", &"a"),
            (7, "wall/stripe 1@100", &"b"),
        ];
        let t = || table.iter().map(|&(id, k, r)| (id, k, r));
        assert_eq!(
            replay("wall/stripe 1@100", &"b", t()),
            Ok(Replay::Existing(7))
        );
        assert_eq!(replay("wall/stripe 2@100", &"b", t()), Ok(Replay::New));
        assert_eq!(
            replay("wall/stripe 0@100", &"b", t()),
            Err(Error::KeyReused {
                key: "wall/stripe 0@100".into(),
                id: 3
            })
        );
        let long = "k".repeat(MAX_KEY_LEN + 1);
        for bad in ["", "tab\there", "é", long.as_str()] {
            assert_eq!(
                replay(bad, &"a", t()),
                Err(Error::BadKey {
                    len: bad.len(),
                    max: MAX_KEY_LEN
                }),
                "{bad:?}"
            );
        }
        assert_eq!(check_key(&long[1..]), Ok(()));
    }
}
