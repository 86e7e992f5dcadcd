//! One `/metrics` answer, in pieces. The per-slot energy families are most of the
//! text at fleet scale (six series a slot: some 20 MB at 100 000 slots), and an answer built
//! whole held it twice over while its string grew, for every scrape at once: a few scrapers
//! could take `fleet serve`'s memory where they liked. Here the registry's own families are one
//! piece, each energy family follows [`ENERGY_PIECE`] slots a piece, each read under the
//! counters' lock for that piece alone, and the end marker closes it. The HTTP body asks for
//! the next piece only when the last has gone to the socket, so a scrape holds one piece and
//! the connection's buffer, whatever its size and however slowly its peer reads.
//!
//! A scrape is not one instant: a slot counted between two pieces shows its new value in the
//! families after it, as between two scrapes.

use std::ops::{Bound, Deref};
use std::sync::Arc;

use super::{ENERGY_FAMILIES, EnergyMetrics, Metrics, PREFIX, Value};
use crate::domain::name::{BenchName, GroupName};

/// The slots an energy piece covers at most: about 70 kB of text, and a lock held for tens of
/// microseconds.
pub const ENERGY_PIECE: usize = 1_000;

/// The pieces of one answer, in order; joined, they are the Prometheus text of every metric.
/// `M` is how the scrape holds the metrics: an `Arc` for an HTTP body, which outlives the
/// handler, or a reference.
pub struct Scrape<M = Arc<Metrics>> {
    metrics: M,
    next: Next,
}

enum Next {
    Registry,
    /// An energy family's next piece: the slots after `after`, or from its header when `None`.
    Energy {
        family: usize,
        after: Option<(GroupName, BenchName)>,
    },
    End,
    Done,
}

impl<M: Deref<Target = Metrics>> Scrape<M> {
    /// A scrape of `metrics`, before its first piece: nothing is read until one is asked for.
    pub fn new(metrics: M) -> Self {
        Scrape {
            metrics,
            next: Next::Registry,
        }
    }
}

impl<M: Deref<Target = Metrics>> Iterator for Scrape<M> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut out = String::new();
        // A piece of slots none of which has the family's series is empty: the next step's
        // text goes with it (an empty frame would be nothing sent for a lock taken).
        while out.is_empty() {
            self.step(&mut out)?;
        }
        Some(out)
    }
}

impl<M: Deref<Target = Metrics>> Scrape<M> {
    /// Writes the next step's text; `None` once the end marker was written.
    fn step(&mut self, out: &mut String) -> Option<()> {
        self.next = match std::mem::replace(&mut self.next, Next::Done) {
            Next::Registry => {
                // Encoding into a String cannot fail.
                let _ =
                    prometheus_client::encoding::text::encode_registry(out, &self.metrics.registry);
                Next::Energy {
                    family: 0,
                    after: None,
                }
            }
            Next::Energy { family, after } => {
                match self.metrics.energy.piece(family, after.as_ref(), out) {
                    Some(last) => Next::Energy {
                        family,
                        after: Some(last),
                    },
                    None if family + 1 < ENERGY_FAMILIES.len() => Next::Energy {
                        family: family + 1,
                        after: None,
                    },
                    None => Next::End,
                }
            }
            Next::End => {
                out.push_str("# EOF\n");
                Next::Done
            }
            Next::Done => return None,
        };
        Some(())
    }
}

impl EnergyMetrics {
    /// Writes `family`'s series of the slots after `after` in (group, slot) order, at most
    /// [`ENERGY_PIECE`] slots, with the family's header first when `after` is `None`. The last
    /// slot written when more may follow; `None` when the family is done.
    fn piece(
        &self,
        family: usize,
        after: Option<&(GroupName, BenchName)>,
        out: &mut String,
    ) -> Option<(GroupName, BenchName)> {
        let (name, help, value) = ENERGY_FAMILIES[family];
        if after.is_none() {
            for line in [("# HELP ", help), ("# TYPE ", "counter")] {
                out.extend([line.0, PREFIX, "_", name, " ", line.1, "\n"]);
            }
        }
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let groups = match after {
            Some((group, _)) => {
                slots.range::<GroupName, _>((Bound::Included(group), Bound::Unbounded))
            }
            None => slots.range::<GroupName, _>(..),
        };
        let mut visited = 0;
        let mut last = None;
        for (group, tallies) in groups {
            let from = match after {
                Some((g, slot)) if g == group => Bound::Excluded(slot),
                _ => Bound::Unbounded,
            };
            for (slot, tally) in tallies.range::<BenchName, _>((from, Bound::Unbounded)) {
                if visited == ENERGY_PIECE {
                    return last.map(|(g, s): (&GroupName, &BenchName)| (g.clone(), s.clone()));
                }
                visited += 1;
                last = Some((group, slot));
                let Some(v) = value(tally) else { continue };
                out.extend([PREFIX, "_", name, "_total{group=\""]);
                escaped(out, group.as_str());
                out.push_str("\",slot=\"");
                escaped(out, slot.as_str());
                out.push_str("\"} ");
                match v {
                    Value::Amount(x) => out.push_str(dtoa::Buffer::new().format(x)),
                    Value::Count(n) => out.push_str(itoa::Buffer::new().format(n)),
                }
                out.push('\n');
            }
        }
        None
    }
}

/// A label value as the text format quotes it. Group and slot names cannot hold these
/// characters today (`domain::name`); the format stays right if they ever may.
fn escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::EnergyStep;

    /// The energy families as prometheus-client encodes a collector of them: what `/metrics`
    /// answered when it was built whole, kept here as the oracle of the pieces.
    #[derive(Debug)]
    struct Whole(Arc<EnergyMetrics>);

    impl prometheus_client::collector::Collector for Whole {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> Result<(), std::fmt::Error> {
            use prometheus_client::encoding::EncodeMetric;
            use prometheus_client::metrics::MetricType;
            use prometheus_client::metrics::counter::ConstCounter;
            let slots = self.0.slots.read().unwrap();
            for (name, help, value) in ENERGY_FAMILIES {
                let mut family =
                    encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
                for (group, tallies) in slots.iter() {
                    for (slot, tally) in tallies {
                        let Some(v) = value(tally) else { continue };
                        let labels = [("group", group.as_str()), ("slot", slot.as_str())];
                        let series = family.encode_family(&labels)?;
                        match v {
                            Value::Amount(x) => ConstCounter::new(x).encode(series)?,
                            Value::Count(n) => ConstCounter::new(n).encode(series)?,
                        }
                    }
                }
            }
            Ok(())
        }
    }

    fn whole(m: &Metrics) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut energy = prometheus_client::registry::Registry::with_prefix(PREFIX);
        energy.register_collector(Box::new(Whole(m.energy.clone())));
        let mut text = String::new();
        encode_registry(&mut text, &m.registry).unwrap();
        encode_registry(&mut text, &energy).unwrap();
        encode_eof(&mut text).unwrap();
        text
    }

    fn group(name: &str) -> GroupName {
        GroupName::parse(name).unwrap()
    }

    fn slot(i: usize) -> BenchName {
        BenchName::parse(&format!("n{i:05}")).unwrap()
    }

    /// A step whose values are not round, and every third with a draw.
    fn step(i: usize) -> EnergyStep {
        EnergyStep {
            on_seconds: i as f64 / 7.0,
            off_seconds: 1e6 + i as f64 * 0.1,
            activations: i as u64 * 3,
            drawn: i
                .is_multiple_of(3)
                .then_some([i as f64 * 1e-9, 0.5, 1e21 + i as f64]),
        }
    }

    /// 2 500 slots in two groups, more than two pieces of each family: the pieces joined are
    /// the text prometheus-client made whole, byte for byte.
    #[test]
    fn the_pieces_joined_are_the_whole_text() {
        let m = Metrics::default();
        m.blind.set(1);
        for i in 0..2_500_usize {
            let g = if i.is_multiple_of(2) {
                "rack-a"
            } else {
                "rack-b"
            };
            m.energy.count(&group(g), &slot(i), step(i));
        }
        let pieces: Vec<String> = Scrape::new(&m).collect();
        assert_eq!(pieces.concat(), whole(&m));
        // The registry, two groups of 1 250 slots in two pieces of each of six families (the
        // last slot of a group and the first of the next may share one), the end.
        assert_eq!(pieces.len(), 1 + 6 * 3 + 1, "{}", pieces.len());
        for piece in &pieces {
            let series = piece
                .lines()
                .filter(|l| l.starts_with("fleet_energy_"))
                .count();
            assert!(series <= ENERGY_PIECE, "{series} series in a piece");
        }
        assert_eq!(pieces.last().map(String::as_str), Some("# EOF\n"));
    }

    /// With nothing counted, the six headers stand alone, as before.
    #[test]
    fn no_slot_counted_gives_the_six_headers() {
        let m = Metrics::default();
        let text = m.encode();
        assert_eq!(text, whole(&m));
        assert_eq!(text.matches("# TYPE fleet_energy_").count(), 6, "{text}");
    }

    /// The three families a slot counted with no draw has.
    const UNDRAWN: [&str; 3] = [
        "energy_on_seconds",
        "energy_off_seconds",
        "energy_activations",
    ];

    /// Counts slot `i` of group `g` a step with no draw.
    fn count_undrawn(m: &Metrics, g: &str, i: usize) {
        let step = EnergyStep {
            drawn: None,
            ..step(i)
        };
        m.energy.count(&group(g), &slot(i), step);
    }

    /// How many times `text` has family `name`'s series of slot `i` of group `g`.
    fn series(text: &str, name: &str, g: &str, i: usize) -> usize {
        let series = format!("fleet_{name}_total{{group=\"{g}\",slot=\"n{i:05}\"}} ");
        text.lines().filter(|l| l.starts_with(&series)).count()
    }

    /// A slot counted while a scrape is between pieces: every slot still appears once in each
    /// family, and a new one in the families whose pieces were not yet made past it.
    #[test]
    fn a_slot_counted_between_pieces_is_neither_lost_nor_doubled() {
        let m = Metrics::default();
        for i in (0..3_000).step_by(2) {
            count_undrawn(&m, "rack", i);
        }
        let mut scrape = Scrape::new(&m);
        // The registry, then `energy_on_seconds`'s first piece: n00000 to n01998.
        let mut text: String = scrape.by_ref().take(2).collect();
        // One slot before where the scrape is, one after it, and one counted again.
        for i in [1, 2_001, 10] {
            count_undrawn(&m, "rack", i);
        }
        text.extend(scrape);
        let of = |name: &str, i: usize| series(&text, name, "rack", i);
        for name in UNDRAWN {
            for i in (0..3_000).step_by(2) {
                assert_eq!(of(name, i), 1, "{name} n{i:05}");
            }
            assert_eq!(of(name, 2_001), 1, "{name}");
        }
        assert_eq!(of("energy_on_seconds", 1), 0);
        assert_eq!(of("energy_off_seconds", 1), 1);
        assert_eq!(of("energy_activations", 1), 1);
        assert!(text.ends_with("# EOF\n"));
    }

    /// A piece that ends on a group's last slot goes on at the next group's first; groups
    /// counted between pieces, one before where the scrape is and one after, are neither lost
    /// nor doubled.
    #[test]
    fn a_piece_ending_at_a_groups_edge_goes_on_at_the_next_group() {
        let m = Metrics::default();
        for i in 0..ENERGY_PIECE {
            count_undrawn(&m, "rack-a", i);
        }
        for i in 0..10 {
            count_undrawn(&m, "rack-b", i);
        }
        let mut scrape = Scrape::new(&m);
        // The registry, then `energy_on_seconds`'s first piece: rack-a whole, nothing of rack-b.
        let first: Vec<String> = scrape.by_ref().take(2).collect();
        assert!(!first[1].contains("rack-b"), "{}", first[1]);
        count_undrawn(&m, "aaa", 0);
        count_undrawn(&m, "zzz", 0);
        let text = first.concat() + &scrape.collect::<String>();
        let of = |name: &str, g: &str, i: usize| series(&text, name, g, i);
        for name in UNDRAWN {
            for i in 0..ENERGY_PIECE {
                assert_eq!(of(name, "rack-a", i), 1, "{name} rack-a n{i:05}");
            }
            for i in 0..10 {
                assert_eq!(of(name, "rack-b", i), 1, "{name} rack-b n{i:05}");
            }
            assert_eq!(of(name, "zzz", 0), 1, "{name}");
            let before = usize::from(name != "energy_on_seconds");
            assert_eq!(of(name, "aaa", 0), before, "{name}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn label_values_are_quoted_as_the_format_wants() {
        let mut out = String::new();
        escaped(&mut out, "a\\b\"c\nd");
        assert_eq!(out, r#"a\\b\"c\nd"#);
    }
}
