//! The characters a text a person reads may hold (SPEC §2.1, §7): none that a terminal or a page
//! would act on instead of showing.
//!
//! Two kinds are refused wherever fleet takes a text that it shows again (a hold reason, a name, a
//! configured label): control characters (C0, DEL, C1: a newline splits a row, an escape moves
//! the cursor or recolours a terminal) and the Unicode bidirectional controls (U+202E and its
//! kin reorder the text around them, so `fleet state` or the page would show a reason other than
//! the one written). Text fleet only relays (an operation's output) is escaped when shown
//! instead, with [`escaped`].
//!
//! Pure: no I/O.

use std::fmt;

/// The bidirectional formatting characters (Unicode UAX #9): the embeddings, overrides and
/// isolates, and the implicit marks.
const BIDI: &[(char, &str)] = &[
    ('\u{061C}', "ARABIC LETTER MARK"),
    ('\u{200E}', "LEFT-TO-RIGHT MARK"),
    ('\u{200F}', "RIGHT-TO-LEFT MARK"),
    ('\u{202A}', "LEFT-TO-RIGHT EMBEDDING"),
    ('\u{202B}', "RIGHT-TO-LEFT EMBEDDING"),
    ('\u{202C}', "POP DIRECTIONAL FORMATTING"),
    ('\u{202D}', "LEFT-TO-RIGHT OVERRIDE"),
    ('\u{202E}', "RIGHT-TO-LEFT OVERRIDE"),
    ('\u{2066}', "LEFT-TO-RIGHT ISOLATE"),
    ('\u{2067}', "RIGHT-TO-LEFT ISOLATE"),
    ('\u{2068}', "FIRST STRONG ISOLATE"),
    ('\u{2069}', "POP DIRECTIONAL ISOLATE"),
];

/// A character a shown text may not hold, and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsafe {
    /// Its position, counted in characters from 1.
    pub position: usize,
    pub character: char,
}

impl Unsafe {
    /// What kind of character it is, in words.
    pub fn kind(&self) -> &'static str {
        if self.character.is_control() {
            "a control character"
        } else {
            "a bidirectional control, which reorders the text around it"
        }
    }
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = u32::from(self.character);
        let name = BIDI
            .iter()
            .find(|(c, _)| *c == self.character)
            .map(|(_, n)| *n)
            .or(match self.character {
                '\t' => Some("TAB"),
                '\n' => Some("LINE FEED"),
                '\r' => Some("CARRIAGE RETURN"),
                '\u{1b}' => Some("ESCAPE"),
                '\0' => Some("NUL"),
                _ => None,
            });
        write!(f, "character {} is U+{code:04X}", self.position)?;
        if let Some(name) = name {
            write!(f, " ({name})")?;
        }
        write!(f, ", {}", self.kind())
    }
}

/// Whether `c` may not appear in a text a person reads.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || BIDI.iter().any(|(b, _)| *b == c)
}

/// The first character of `text` it may not hold, if any.
pub fn first_unsafe(text: &str) -> Option<Unsafe> {
    text.chars()
        .enumerate()
        .find(|(_, c)| is_unsafe(*c))
        .map(|(i, character)| Unsafe {
            position: i + 1,
            character,
        })
}

/// `text` with every character [`is_unsafe`] refuses written as `\u{…}`, for text fleet relays
/// but did not take from a person (an operation's output, a value a bench wrote): it shows as
/// itself, never as what a terminal or a page would make of it.
pub fn escaped(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The lines of `text`, split where [`str::lines`] splits (LF, CRLF), each [`escaped`]: how fleet
/// shows text it relays (an operation's output), the same in a terminal (`fleet describe`,
/// `fleet claim --wait`) and on the live page, so the two never differ (SPEC §7 S7). A lone CR
/// is no line break here, so it shows as `\u{d}`, as every other control does.
pub fn escaped_lines(text: &str) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    text.lines().map(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_controls_are_found_with_their_position() {
        assert_eq!(first_unsafe("plain text, é and 漢字"), None);
        let found = first_unsafe("ok \u{202E}gnp.exe").unwrap();
        assert_eq!((found.position, found.character), (4, '\u{202E}'));
        assert_eq!(
            found.to_string(),
            "character 4 is U+202E (RIGHT-TO-LEFT OVERRIDE), a bidirectional control, which \
             reorders the text around it"
        );
        let tab = first_unsafe("a\tb").unwrap();
        assert_eq!(
            tab.to_string(),
            "character 2 is U+0009 (TAB), a control character"
        );
        assert_eq!(
            first_unsafe("\u{9b}").unwrap().to_string(),
            "character 1 is U+009B, a control character"
        );
        // The controls a person knows by name are named.
        for (text, named) in [
            ("\n", "U+000A (LINE FEED)"),
            ("\r", "U+000D (CARRIAGE RETURN)"),
            ("\u{1b}", "U+001B (ESCAPE)"),
            ("\0", "U+0000 (NUL)"),
        ] {
            let said = first_unsafe(text).unwrap().to_string();
            assert_eq!(said, format!("character 1 is {named}, a control character"));
        }
    }

    // Over every character of the planes where these live: refused exactly when it is a control
    // (C0, DEL, C1) or one of the twelve bidirectional controls.
    #[test]
    fn the_rule_refuses_exactly_the_controls_and_the_bidi_controls() {
        let mut refused = Vec::new();
        for code in 0..=0x2FFFFu32 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            if is_unsafe(c) {
                refused.push(code);
            }
        }
        let mut expected: Vec<u32> = (0..0x20).chain(0x7F..0xA0).collect();
        expected.extend(BIDI.iter().map(|(c, _)| u32::from(*c)));
        expected.sort_unstable();
        assert_eq!(refused, expected);
    }

    #[test]
    fn relayed_text_is_escaped_not_refused() {
        assert_eq!(escaped("all fine"), "all fine");
        assert_eq!(
            escaped("\u{1b}[2Jfleet is fine\r\u{202E}x"),
            "\\u{1b}[2Jfleet is fine\\u{d}\\u{202e}x"
        );
    }

    // SPEC §7 S7: relayed text keeps its LF and CRLF breaks as lines and shows every control
    // inside a line, a lone CR among them, as its `\u{…}` form.
    #[test]
    fn relayed_lines_are_split_at_line_feeds_and_each_escaped() {
        let lines: Vec<_> = escaped_lines("one\r\ntwo\rthree\n\u{1b}[2J \u{202E}\u{7}").collect();
        assert_eq!(
            lines,
            ["one", "two\\u{d}three", "\\u{1b}[2J \\u{202e}\\u{7}"]
        );
    }
}
