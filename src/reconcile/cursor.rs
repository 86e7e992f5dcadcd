//! The cursor a pass finds each slot's bench with, in the snapshot's sorted benches.

use crate::domain::name::BenchName;
use crate::domain::state::Bench;
use crate::store::presence::Snapshot;

/// A snapshot's benches (sorted by name), found for slots walked in name order: each lookup
/// starts where the last one ended, and looks a few benches ahead before it searches the rest,
/// so a group whose slots are most of the benches in their stretch costs a step or two a slot,
/// and any other a search of what lies ahead. A name before the last one found is searched for
/// in the whole. The same answers as a search of the whole for each name.
pub(super) struct Benches<'a> {
    benches: &'a [Bench],
    at: usize,
}

impl<'a> Benches<'a> {
    /// How far ahead a lookup steps before it searches.
    const STEPS: usize = 4;

    pub(super) fn new(snapshot: &'a Snapshot) -> Benches<'a> {
        Benches {
            benches: &snapshot.benches,
            at: 0,
        }
    }

    pub(super) fn find(&mut self, name: &BenchName) -> Option<&'a Bench> {
        let behind = self.at > 0 && self.benches[self.at - 1].name >= *name;
        if behind {
            let found = self.benches.binary_search_by(|b| b.name.cmp(name));
            return found.ok().map(|i| &self.benches[i]);
        }
        let ahead = &self.benches[self.at..];
        let step = ahead.iter().take(Self::STEPS).position(|b| b.name >= *name);
        let at = match step {
            Some(i) => i,
            None => ahead
                .binary_search_by(|b| b.name.cmp(name))
                .unwrap_or_else(|i| i),
        };
        self.at += at;
        let bench = self.benches.get(self.at).filter(|b| b.name == *name)?;
        self.at += 1;
        Some(bench)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::state::Reading;
    use chrono::DateTime;
    use proptest::prelude::*;

    fn bench(name: &str) -> Bench {
        Bench {
            name: BenchName::parse(name).expect("valid"),
            load: None,
            cores: None,
            reading: Reading::Missing,
            requested_hold: None,
        }
    }

    proptest! {
        // Whatever the order of the names asked for (ascending, as a pass walks them, or not),
        // the cursor finds exactly the benches a search of the whole finds.
        #[test]
        fn the_cursor_finds_what_a_search_of_the_whole_finds(
            there in proptest::collection::btree_set(0u16..400, 0..200),
            mut asked in proptest::collection::vec(0u16..420, 0..300),
            sorted in any::<bool>(),
        ) {
            let name = |i: u16| format!("b-{i:03}");
            let snapshot = Snapshot {
                now: DateTime::default(),
                benches: there.iter().map(|&i| bench(&name(i))).collect(),
                foreign: Vec::new(),
                problems: Vec::new(),
            };
            if sorted {
                asked.sort();
            }
            let mut cursor = Benches::new(&snapshot);
            for i in asked {
                let wanted = BenchName::parse(&name(i)).expect("valid");
                let found = cursor.find(&wanted).map(|b| b.name.clone());
                let searched = snapshot
                    .benches
                    .binary_search_by(|b| b.name.cmp(&wanted))
                    .ok()
                    .map(|j| snapshot.benches[j].name.clone());
                prop_assert_eq!(found, searched);
            }
        }
    }
}
