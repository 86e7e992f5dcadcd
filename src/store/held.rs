//! A large group's claims as its last batched read found them (SPEC §4.3, decision 0019): what
//! `claims_read` serves while the group's count of changes stands, and the digests it checks a
//! part of them against at each read.

use std::hash::BuildHasher;

use crate::domain::claim::Claim;

/// Reads over which every held claim is read again: each read served from a held copy reads and
/// compares a `1 / CHECKS` part of its claims, the next part at the next read.
const CHECKS: usize = 10;

/// A large group's claims as a batched read found them, and the count of changes they were read
/// at.
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub(super) changes: String,
    pub(super) names: Vec<String>,
    /// Each listed claim's value as read, digested: what a read served from this copy compares a
    /// part of the claims with.
    pub(super) digests: Digests,
    pub(super) claims: std::sync::Arc<Vec<Claim>>,
    pub(super) unreadable: Vec<(String, String)>,
    pub(super) unreadable_slots: Vec<Option<String>>,
    /// Reads served from this copy: which part of its claims the next one checks.
    pub(super) served: usize,
}

/// The digest of each claim's value, in the listing's order, by a seed of this copy's own: a value
/// edited by hand reads as the one held only by a 64-bit collision it cannot aim at.
#[derive(Clone, Debug)]
pub(super) struct Digests {
    state: foldhash::quality::RandomState,
    of: Vec<u64>,
}

impl Digests {
    pub(super) fn new<'a>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>>) -> Self {
        let state = foldhash::quality::RandomState::default();
        let of = values.map(|v| state.hash_one(v)).collect();
        Digests { state, of }
    }

    /// Whether `values`, read again for the names `at`, are the ones these digests were made of.
    pub(super) fn same<'a>(
        &self,
        at: std::ops::Range<usize>,
        values: impl ExactSizeIterator<Item = Option<&'a [u8]>>,
    ) -> bool {
        self.of.get(at).is_some_and(|held| {
            held.len() == values.len()
                && held
                    .iter()
                    .zip(values)
                    .all(|(d, v)| *d == self.state.hash_one(v))
        })
    }
}

/// The part of a held copy's `len` claims its `served`-th read checks: the `served % CHECKS`-th
/// of `CHECKS` parts, so `CHECKS` reads in a row check every claim once.
pub(super) fn checked(len: usize, served: usize) -> std::ops::Range<usize> {
    let part = served % CHECKS;
    len * part / CHECKS..len * (part + 1) / CHECKS
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ten reads in a row check every claim of a copy once, in parts that differ by at most one.
    #[test]
    fn ten_reads_check_every_claim_once() {
        for len in [0, 1, 9, 10, 11, 599, 600, 50_000] {
            let mut seen = vec![0; len];
            let mut sizes = Vec::new();
            for served in 7..7 + CHECKS {
                let part = checked(len, served);
                sizes.push(part.len());
                for i in part {
                    seen[i] += 1;
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{len}: {seen:?}");
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            assert!(
                hi.zip(lo).is_none_or(|(h, l)| h - l <= 1),
                "{len}: {sizes:?}"
            );
        }
    }

    // A digest says whether a value read again is the one held: an edit, a deletion, or a value
    // read for another name is not.
    #[test]
    fn digests_tell_a_changed_value() {
        let values = [Some("a"), None, Some("c"), Some("d")];
        let bytes =
            |v: &[Option<&'static str>]| v.iter().map(|x| x.map(str::as_bytes)).collect::<Vec<_>>();
        let d = Digests::new(bytes(&values).into_iter());
        let read = |v: &[Option<&'static str>]| bytes(v).into_iter();
        assert!(d.same(0..4, read(&values)));
        assert!(d.same(1..3, read(&[None, Some("c")])));
        assert!(
            !d.same(1..3, read(&[Some("b"), Some("c")])),
            "a key that came back"
        );
        assert!(!d.same(2..4, read(&[Some("c"), None])), "a key deleted");
        assert!(
            !d.same(2..4, read(&[Some("c"), Some("e")])),
            "a value edited"
        );
        assert!(!d.same(0..2, read(&[Some("a")])), "fewer values than names");
        assert!(!d.same(3..5, read(&[Some("d"), None])), "past the end");
    }
}
