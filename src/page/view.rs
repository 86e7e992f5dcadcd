//! What one open page looks at, and what it is sent when the fleet changes (SPEC §4.13).
//!
//! A page names its view in its address: the slots of one group, phase, power or bench state,
//! whose name starts with a prefix, one page of `PAGE` at a time (`/?group=pool-a&phase=booting
//! &page=2`). The same query on `/events` streams that view. The server filters and pages, so
//! what a page is sent is what it shows, whatever the fleet's size.
//!
//! A rendered view is a list of parts (`Main`), each a section of the page; a part with a table
//! keeps its rows apart, each under its key. After the first frame a page is sent only what
//! changed since the frame before (`delta`): a part whose text changed is sent whole, and in a
//! table whose head and foot are the same, only the rows that are new or changed and the order
//! of the keys. One slot changing at 100 000 slots sends its row, its group's row and the
//! summary: a few kilobytes, not the table.

use std::fmt::Write;

use crate::domain::name::GroupName;
use crate::domain::state::State;

use super::frame::{BENCHES, Frame, Line, PHASES, POWERS};

/// Escapes text for an element's content or a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// How many slots a page of the table holds.
pub const PAGE: usize = 50;
/// The longest name prefix a view may filter by: no name is longer.
const PREFIX_MAX: usize = 253;

/// The slots one page looks at: its filters and its page of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Query {
    pub group: Option<GroupName>,
    /// A word of `PHASES`.
    pub phase: Option<&'static str>,
    /// A word of `POWERS`.
    pub power: Option<&'static str>,
    pub bench: Option<State>,
    pub prefix: Option<String>,
    /// From 1.
    pub page: usize,
}

/// The word a bench state is written and filtered by.
pub fn bench_word(state: State) -> &'static str {
    match state {
        State::Up => "UP",
        State::Held => "HELD",
        State::Down => "DOWN",
    }
}

impl Query {
    /// Reads a view from a URL's query string; what cannot be read is an error that says what
    /// each key takes. An empty value is no filter, as an unchosen select sends it.
    pub fn parse(query: &str) -> Result<Query, String> {
        let mut q = Query {
            page: 1,
            ..Query::default()
        };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            let word =
                |words: &[&'static str], what: &str| {
                    words.iter().copied().find(|w| *w == value).ok_or_else(|| {
                        format!("{what} {value:?} is not one of {}", words.join(", "))
                    })
                };
            match &*key {
                "group" => {
                    q.group = Some(GroupName::parse(value).map_err(|e| format!("group: {e}"))?);
                }
                "phase" => q.phase = Some(word(&PHASES, "phase")?),
                "power" => q.power = Some(word(&POWERS, "power")?),
                "bench" => {
                    let words = BENCHES.map(bench_word);
                    let up = value.to_ascii_uppercase();
                    let at = words.iter().position(|w| *w == up).ok_or_else(|| {
                        format!("bench {value:?} is not one of {}", words.join(", "))
                    })?;
                    q.bench = Some(BENCHES[at]);
                }
                "prefix" => {
                    if value.len() > PREFIX_MAX {
                        return Err(format!(
                            "prefix: {} characters, more than a name has ({PREFIX_MAX})",
                            value.len()
                        ));
                    }
                    q.prefix = Some(value.to_owned());
                }
                "page" => {
                    q.page = value
                        .parse::<usize>()
                        .ok()
                        .filter(|p| *p >= 1)
                        .ok_or_else(|| format!("page {value:?} is not a number from 1"))?;
                }
                other => {
                    return Err(format!(
                        "unknown key {other:?}: a view takes group, phase, power, bench, prefix \
                         and page"
                    ));
                }
            }
        }
        Ok(q)
    }

    /// The query string of this view, with `page` (none for the first), as links write it.
    pub fn to_query(&self, page: usize) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        if let Some(g) = &self.group {
            out.append_pair("group", g.as_str());
        }
        if let Some(p) = self.phase {
            out.append_pair("phase", p);
        }
        if let Some(p) = self.power {
            out.append_pair("power", p);
        }
        if let Some(b) = self.bench {
            out.append_pair("bench", bench_word(b));
        }
        if let Some(p) = &self.prefix {
            out.append_pair("prefix", p);
        }
        if page > 1 {
            out.append_pair("page", &page.to_string());
        }
        let text = out.finish();
        if text.is_empty() {
            "?".to_owned()
        } else {
            format!("?{text}")
        }
    }

    /// Whether it filters at all.
    pub fn filters(&self) -> bool {
        self.group.is_some()
            || self.phase.is_some()
            || self.power.is_some()
            || self.bench.is_some()
            || self.prefix.is_some()
    }

    /// The slots of `frame` this view keeps: how many match, and those on its page (the last
    /// page when it asks for one past the end), with the page shown.
    pub fn select<'f>(&self, frame: &'f Frame) -> Selected<'f> {
        let group = self
            .group
            .as_ref()
            .map(|g| frame.group_index(g.as_str()).unwrap_or(u32::MAX));
        let keep = |l: &&Line| {
            group.is_none_or(|g| l.group == g)
                && self
                    .phase
                    .is_none_or(|p| super::frame::phase_word(l.phase) == p)
                && self.power.is_none_or(|p| l.power == p)
                && self.bench.is_none_or(|b| l.bench == b)
                && self
                    .prefix
                    .as_deref()
                    .is_none_or(|p| l.name.as_str().starts_with(p))
        };
        let matching = frame.slots.iter().filter(keep).count();
        let pages = matching.div_ceil(PAGE).max(1);
        let page = self.page.clamp(1, pages);
        let rows = frame
            .slots
            .iter()
            .filter(keep)
            .skip((page - 1) * PAGE)
            .take(PAGE)
            .collect();
        Selected {
            matching,
            page,
            pages,
            rows,
        }
    }
}

/// A view's slots in one frame.
pub struct Selected<'f> {
    pub matching: usize,
    pub page: usize,
    pub pages: usize,
    pub rows: Vec<&'f Line>,
}

/// A rendered view: its parts in the page's order.
#[derive(Debug, PartialEq, Eq)]
pub struct Main {
    pub parts: Vec<Part>,
    /// Whether it shows the last read under a banner (the store could not be read).
    pub stale: bool,
}

/// A section of the page. Its HTML is `<section id="ID">` + `head` + its rows + `foot` +
/// `</section>`.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    pub id: &'static str,
    pub head: String,
    pub rows: Option<Rows>,
    pub foot: String,
}

/// A table's rows, each under its key (the value of its `data-BY` attribute).
#[derive(Debug, PartialEq, Eq)]
pub struct Rows {
    pub by: &'static str,
    pub keyed: Vec<(String, String)>,
}

impl Part {
    /// A section with no table of keyed rows.
    pub fn plain(id: &'static str, html: String) -> Part {
        Part {
            id,
            head: html,
            rows: None,
            foot: String::new(),
        }
    }

    fn inner(&self, out: &mut String) {
        out.push_str(&self.head);
        for (_, row) in self.rows.iter().flat_map(|r| &r.keyed) {
            out.push_str(row);
        }
        out.push_str(&self.foot);
    }
}

impl Main {
    /// The whole `<main>` content.
    pub fn html(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            let _ = write!(out, "<section id=\"{}\">", part.id);
            part.inner(&mut out);
            out.push_str("</section>");
        }
        out
    }

    /// What a page that shows `self` is sent to show `next`: `None` when nothing changed, else
    /// the `delta` data (templates, one per changed part) or, when the parts themselves differ
    /// or the banner comes or goes, the whole frame (`Whole`).
    pub fn delta(&self, next: &Main) -> Option<Change> {
        let same_parts = self.stale == next.stale
            && self.parts.len() == next.parts.len()
            && self
                .parts
                .iter()
                .zip(&next.parts)
                .all(|(a, b)| a.id == b.id);
        if !same_parts {
            return Some(Change::Whole);
        }
        let mut out = String::new();
        for (was, now) in self.parts.iter().zip(&next.parts) {
            if was == now {
                continue;
            }
            match (&was.rows, &now.rows) {
                (Some(old), Some(new))
                    if was.head == now.head && was.foot == now.foot && old.by == new.by =>
                {
                    rows_delta(&mut out, now.id, old, new);
                }
                _ => {
                    let _ = write!(out, "<template data-part=\"{}\">", now.id);
                    now.inner(&mut out);
                    out.push_str("</template>");
                }
            }
        }
        (!out.is_empty()).then_some(Change::Delta(out))
    }
}

/// What a page is sent for a change.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    Whole,
    Delta(String),
}

/// A table's change: the new order of its keys, and the rows that are new or changed.
fn rows_delta(out: &mut String, id: &str, old: &Rows, new: &Rows) {
    let before: std::collections::HashMap<&str, &str> = old
        .keyed
        .iter()
        .map(|(k, r)| (k.as_str(), r.as_str()))
        .collect();
    let keys: Vec<String> = new.keyed.iter().map(|(k, _)| esc(k)).collect();
    let _ = write!(
        out,
        "<template data-rows=\"{id}\" data-by=\"{}\" data-keys=\"{}\">",
        new.by,
        keys.join(" ")
    );
    for (key, row) in &new.keyed {
        if before.get(key.as_str()) != Some(&row.as_str()) {
            out.push_str(row);
        }
    }
    out.push_str("</template>");
}

/// The links of a page of `pages`: first, previous, next and last, each keeping the filter.
pub fn pager(q: &Query, page: usize, pages: usize) -> String {
    let mut out = String::from("<nav class=\"pager\" aria-label=\"Pages of slots\">");
    let link = |out: &mut String, to: usize, label: &str, rel: &str| {
        if to == page || to == 0 || to > pages {
            let _ = write!(out, "<span aria-disabled=\"true\">{label}</span>");
        } else {
            let _ = write!(
                out,
                "<a href=\"{}#s-slots\"{rel}>{label}</a>",
                esc(&q.to_query(to))
            );
        }
    };
    link(&mut out, 1, "First", "");
    link(
        &mut out,
        page.saturating_sub(1),
        "Previous",
        " rel=\"prev\"",
    );
    let _ = write!(out, "<span>Page {page} of {pages}</span>");
    link(&mut out, page + 1, "Next", " rel=\"next\"");
    link(&mut out, pages, "Last", "");
    out.push_str("</nav>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &'static str, head: &str, rows: &[(&str, &str)]) -> Part {
        Part {
            id,
            head: head.to_owned(),
            rows: Some(Rows {
                by: "slot",
                keyed: rows
                    .iter()
                    .map(|(k, r)| ((*k).to_owned(), (*r).to_owned()))
                    .collect(),
            }),
            foot: "</tbody></table>".to_owned(),
        }
    }

    fn main(parts: Vec<Part>) -> Main {
        Main {
            parts,
            stale: false,
        }
    }

    #[test]
    fn a_view_reads_every_filter_and_says_what_a_bad_one_takes() {
        let q = Query::parse("group=pool-a&phase=booting&power=on&bench=held&prefix=b1&page=3")
            .unwrap();
        assert_eq!(q.group.as_ref().unwrap().as_str(), "pool-a");
        assert_eq!(
            (q.phase, q.power, q.bench, q.prefix.as_deref(), q.page),
            (
                Some("booting"),
                Some("on"),
                Some(State::Held),
                Some("b1"),
                3
            )
        );
        assert_eq!(
            q.to_query(3),
            "?group=pool-a&phase=booting&power=on&bench=HELD&prefix=b1&page=3"
        );
        assert_eq!(Query::parse(&q.to_query(3)[1..]).unwrap(), q);
        let empty = Query::parse("group=&phase=").unwrap();
        assert!(!empty.filters());
        assert_eq!(empty.page, 1);
        assert_eq!(empty.to_query(1), "?");
        for (bad, says) in [
            ("phase=asleep", "phase \"asleep\" is not one of idle, off"),
            (
                "power=maybe",
                "power \"maybe\" is not one of on, off, unknown",
            ),
            ("bench=gone", "bench \"gone\" is not one of UP, HELD, DOWN"),
            ("group=Pool_A", "group:"),
            ("page=0", "page \"0\" is not a number from 1"),
            ("page=x", "page \"x\""),
            ("sort=name", "unknown key \"sort\""),
        ] {
            let e = Query::parse(bad).unwrap_err();
            assert!(e.starts_with(says), "{bad}: {e}");
        }
        let long = format!("prefix={}", "a".repeat(254));
        assert!(Query::parse(&long).unwrap_err().contains("254 characters"));
    }

    #[test]
    fn nothing_changed_sends_nothing_and_one_changed_row_sends_that_row_and_the_order() {
        let a = main(vec![
            Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
            part(
                "s-slots",
                "<table><tbody>",
                &[("b1", "<tr>1</tr>"), ("b2", "<tr>2</tr>")],
            ),
        ]);
        let same = main(vec![
            Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
            part(
                "s-slots",
                "<table><tbody>",
                &[("b1", "<tr>1</tr>"), ("b2", "<tr>2</tr>")],
            ),
        ]);
        assert_eq!(a.delta(&same), None);
        let one = main(vec![
            Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
            part(
                "s-slots",
                "<table><tbody>",
                &[("b1", "<tr>1</tr>"), ("b2", "<tr>2!</tr>")],
            ),
        ]);
        assert_eq!(
            a.delta(&one),
            Some(Change::Delta(
                "<template data-rows=\"s-slots\" data-by=\"slot\" data-keys=\"b1 b2\">\
                 <tr>2!</tr></template>"
                    .to_owned()
            ))
        );
        // A row gone and one new: the new order, and the new row alone.
        let moved = main(vec![
            Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
            part(
                "s-slots",
                "<table><tbody>",
                &[("b3", "<tr>3</tr>"), ("b1", "<tr>1</tr>")],
            ),
        ]);
        assert_eq!(
            a.delta(&moved),
            Some(Change::Delta(
                "<template data-rows=\"s-slots\" data-by=\"slot\" data-keys=\"b3 b1\">\
                 <tr>3</tr></template>"
                    .to_owned()
            ))
        );
    }

    #[test]
    fn a_changed_head_sends_the_part_whole_and_changed_parts_send_the_frame() {
        let a = main(vec![
            Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
            part("s-slots", "<table><tbody>", &[("b1", "<tr>1</tr>")]),
        ]);
        let head = main(vec![
            Part::plain("s-summary", "<p>3 slots</p>".to_owned()),
            part(
                "s-slots",
                "<table class=\"x\"><tbody>",
                &[("b1", "<tr>1</tr>")],
            ),
        ]);
        assert_eq!(
            a.delta(&head),
            Some(Change::Delta(
                "<template data-part=\"s-summary\"><p>3 slots</p></template>\
                 <template data-part=\"s-slots\"><table class=\"x\"><tbody><tr>1</tr>\
                 </tbody></table></template>"
                    .to_owned()
            ))
        );
        let fewer = main(vec![Part::plain("s-summary", "<p>2 slots</p>".to_owned())]);
        assert_eq!(a.delta(&fewer), Some(Change::Whole));
        let stale = Main {
            parts: vec![
                Part::plain("s-summary", "<p>2 slots</p>".to_owned()),
                part("s-slots", "<table><tbody>", &[("b1", "<tr>1</tr>")]),
            ],
            stale: true,
        };
        assert_eq!(a.delta(&stale), Some(Change::Whole));
        assert_eq!(
            a.html(),
            "<section id=\"s-summary\"><p>2 slots</p></section><section id=\"s-slots\">\
             <table><tbody><tr>1</tr></tbody></table></section>"
        );
    }

    #[test]
    fn the_pager_keeps_the_filter_and_disables_what_leads_nowhere() {
        let q = Query::parse("phase=off").unwrap();
        let p = pager(&q, 1, 3);
        assert!(
            p.contains("<span aria-disabled=\"true\">First</span>"),
            "{p}"
        );
        assert!(
            p.contains("<span aria-disabled=\"true\">Previous</span>"),
            "{p}"
        );
        assert!(
            p.contains("<a href=\"?phase=off&amp;page=2#s-slots\" rel=\"next\">Next</a>"),
            "{p}"
        );
        assert!(
            p.contains("<a href=\"?phase=off&amp;page=3#s-slots\">Last</a>"),
            "{p}"
        );
        assert!(p.contains("Page 1 of 3"), "{p}");
        let last = pager(&q, 3, 3);
        assert!(
            last.contains("<a href=\"?phase=off#s-slots\">First</a>"),
            "{last}"
        );
        assert!(
            last.contains("<span aria-disabled=\"true\">Next</span>"),
            "{last}"
        );
    }
}
