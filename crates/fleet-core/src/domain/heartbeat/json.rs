//! Strict JSON, as the presence protocol reads every value a bench or an operator wrote
//! (docs/protocol.md §2.1): RFC 8259 and nothing looser, with the limits a reader in any language
//! can hold to. A text is one object, with only space, tab, line feed and carriage return around
//! and between its tokens; every string is Unicode (a `\u` escape of a surrogate stands only as
//! the first half of a pair); an object names each member once (or, for a hold request, the last
//! of a repeated member counts); arrays and objects nest at most [`MAX_DEPTH`] deep. Numbers are
//! kept as written, so a reader decides what a field's form and range are.
//!
//! Pure: no I/O. The caller has checked the bytes are UTF-8 (a `&str`).

use std::borrow::Cow;
use std::fmt;

/// How deep arrays and objects may nest, the top object counting as one: the default limit of
/// the strictest common parser (.NET's `System.Text.Json`), so any reader can hold to it.
pub const MAX_DEPTH: usize = 64;

/// What a reader does with a member an object names twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeats {
    /// The text is refused (a heartbeat value).
    Refused,
    /// The last one counts (a hold request, as the previous release's decoder read it).
    LastCounts,
}

/// One member's value in the top object, as far as a reader looks into it.
#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// A number as written; its grammar is checked, its value is the reader's to take.
    Number(&'a str),
    String(Cow<'a, str>),
    /// An array or an object: checked throughout, not kept.
    Nested,
}

/// Why a text is not strict JSON, and the byte where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub at: usize,
    pub why: Cow<'static, str>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.why, self.at)
    }
}

/// The members of the one object `text` is, in the order written (a repeated one, where the last
/// counts, in its first place).
pub fn object(text: &str, repeats: Repeats) -> Result<Vec<(Cow<'_, str>, Json<'_>)>, Error> {
    let mut p = Parser {
        text,
        pos: 0,
        repeats,
    };
    p.space();
    if p.peek() != Some(b'{') {
        return p.fail("not a JSON object");
    }
    let members = p.object(1)?;
    p.space();
    if p.pos != text.len() {
        return p.fail("text after the object");
    }
    Ok(members)
}

/// The value of a number written as an integer (no fraction, no exponent; `-0` is 0), exact, or
/// `None` when it is written otherwise. One past ±2¹²⁷ saturates: it is past every range.
pub fn integer(number: &str) -> Option<i128> {
    if number.contains(['.', 'e', 'E']) {
        return None;
    }
    Some(
        number
            .parse::<i128>()
            .unwrap_or(if number.starts_with('-') {
                i128::MIN
            } else {
                i128::MAX
            }),
    )
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    repeats: Repeats,
}

impl<'a> Parser<'a> {
    fn fail<T>(&self, why: impl Into<Cow<'static, str>>) -> Result<T, Error> {
        Err(Error {
            at: self.pos,
            why: why.into(),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// JSON's white space, and nothing else (no BOM, no U+00A0).
    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), Error> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            self.fail(what)
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json<'a>, Error> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1).map(|_| Json::Nested),
            Some(b'[') => self.array(depth + 1).map(|()| Json::Nested),
            Some(b'"') => self.string().map(Json::String),
            Some(b'-' | b'0'..=b'9') => self.number().map(Json::Number),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(_) => self.fail("not a JSON value"),
            None => self.fail("the text ends inside the object"),
        }
    }

    fn literal(&mut self, word: &'static str, value: Json<'a>) -> Result<Json<'a>, Error> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(value)
        } else {
            self.fail("not a JSON value")
        }
    }

    fn nest(&self, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return self.fail(format!("nested deeper than {MAX_DEPTH}"));
        }
        Ok(())
    }

    fn object(&mut self, depth: usize) -> Result<Vec<(Cow<'a, str>, Json<'a>)>, Error> {
        self.nest(depth)?;
        self.expect(b'{', "not a JSON object")?;
        let mut members: Vec<(Cow<'a, str>, Json<'a>)> = Vec::new();
        self.space();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(members);
        }
        loop {
            self.space();
            let at = self.pos;
            if self.peek() != Some(b'"') {
                return self.fail("a member's name is not a string");
            }
            let name = self.string()?;
            self.space();
            self.expect(b':', "no ':' after a member's name")?;
            self.space();
            let value = self.value(depth)?;
            match (members.iter().position(|(n, _)| *n == name), self.repeats) {
                (None, _) => members.push((name, value)),
                (Some(i), Repeats::LastCounts) => members[i].1 = value,
                (Some(_), Repeats::Refused) => {
                    return Err(Error {
                        at,
                        why: format!("the member {name:?} is named twice").into(),
                    });
                }
            }
            self.space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(members);
                }
                _ => return self.fail("no ',' or '}' after a member"),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), Error> {
        self.nest(depth)?;
        self.expect(b'[', "not a JSON array")?;
        self.space();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.space();
            self.value(depth)?;
            self.space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return self.fail("no ',' or ']' after an element"),
            }
        }
    }

    /// A number's text, by RFC 8259's grammar: `-`? (`0` | a digit 1–9 and digits), a fraction
    /// of one digit or more, an exponent of one digit or more.
    fn number(&mut self) -> Result<&'a str, Error> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.fail("a number without digits"),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.fail("a fraction without digits");
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return self.fail("an exponent without digits");
            }
            self.digits();
        }
        Ok(&self.text[start..self.pos])
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    /// A string, its escapes decoded: borrowed from the text when it has none.
    fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        self.expect(b'"', "not a string")?;
        let start = self.pos;
        let mut owned: Option<String> = None;
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                return self.fail("the text ends inside a string");
            };
            match c {
                '"' => {
                    let text = match owned {
                        Some(s) => Cow::Owned(s),
                        None => Cow::Borrowed(&self.text[start..self.pos]),
                    };
                    self.pos += 1;
                    return Ok(text);
                }
                '\\' => {
                    let s = owned.get_or_insert_with(|| self.text[start..self.pos].to_owned());
                    let decoded = Self::escape(self.text, &mut self.pos)?;
                    s.push(decoded);
                }
                '\u{0}'..='\u{1f}' => {
                    return self.fail(format!(
                        "a control character (U+{:04X}) not escaped in a string",
                        u32::from(c)
                    ));
                }
                c => {
                    if let Some(s) = owned.as_mut() {
                        s.push(c);
                    }
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    /// One escape at `pos` (its backslash), decoded; `pos` moves past it. A `\u` escape of a high
    /// surrogate must be followed by one of a low surrogate: the two are one character.
    fn escape(text: &str, pos: &mut usize) -> Result<char, Error> {
        let fail = |at: usize, why: &'static str| {
            Err(Error {
                at,
                why: why.into(),
            })
        };
        let at = *pos;
        let Some(&kind) = text.as_bytes().get(at + 1) else {
            return fail(at, "the text ends inside an escape");
        };
        *pos += 2;
        let c = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = Self::hex(text, pos)?;
                let code = match first {
                    0xD800..=0xDBFF => {
                        if !text[*pos..].starts_with("\\u") {
                            return fail(at, "a lone surrogate escape");
                        }
                        *pos += 2;
                        let second = Self::hex(text, pos)?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return fail(at, "a lone surrogate escape");
                        }
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return fail(at, "a lone surrogate escape"),
                    code => code,
                };
                char::from_u32(code).expect("a scalar value: surrogates are paired above")
            }
            _ => return fail(at, "an escape JSON does not have"),
        };
        Ok(c)
    }

    /// Four hex digits, either case, at `pos`.
    fn hex(text: &str, pos: &mut usize) -> Result<u32, Error> {
        let digits = text
            .get(*pos..*pos + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(digits) = digits else {
            return Err(Error {
                at: *pos,
                why: "a \\u escape without four hex digits".into(),
            });
        };
        *pos += 4;
        Ok(u32::from_str_radix(digits, 16).expect("four hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(text: &str) -> Result<Vec<(String, Json<'_>)>, String> {
        object(text, Repeats::Refused)
            .map(|m| m.into_iter().map(|(n, v)| (n.into_owned(), v)).collect())
            .map_err(|e| e.why.into_owned())
    }

    #[test]
    fn an_object_gives_its_members_as_written() {
        let got =
            members(" {\"a\" : 1 ,\"b\":\"x\\/y\",\"c\":[1,{\"d\":null}],\"e\":true}\r\n").unwrap();
        assert_eq!(
            got,
            [
                ("a".to_owned(), Json::Number("1")),
                ("b".to_owned(), Json::String("x/y".into())),
                ("c".to_owned(), Json::Nested),
                ("e".to_owned(), Json::Bool(true)),
            ]
        );
        assert_eq!(members("{}").unwrap(), []);
    }

    // docs/protocol.md §2.1, rule by rule: what is refused, and why.
    #[test]
    fn what_is_not_strict_json_is_refused_naming_why() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(63), "]".repeat(63));
        let deeper = format!("{{\"a\":{}1{}}}", "[".repeat(64), "]".repeat(64));
        assert!(members(&deep).is_ok(), "64 deep, the object counting");
        // Objects in objects count as arrays do.
        let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        assert!(members(&objects(64)).is_ok(), "64 objects deep");
        assert_eq!(
            members(&objects(65)),
            Err("nested deeper than 64".to_owned())
        );
        for (text, why) in [
            ("", "not a JSON object"),
            ("[1]", "not a JSON object"),
            ("\u{feff}{}", "not a JSON object"),
            ("\u{a0}{}", "not a JSON object"),
            ("{} {}", "text after the object"),
            ("{\"a\":1,}", "a member's name is not a string"),
            ("{\"a\":1 \"b\":2}", "no ',' or '}' after a member"),
            ("{\"a\" 1}", "no ':' after a member's name"),
            ("{'a':1}", "a member's name is not a string"),
            ("{\"a\":NaN}", "not a JSON value"),
            ("{\"a\":Infinity}", "not a JSON value"),
            ("{\"a\":True}", "not a JSON value"),
            ("{\"a\":nul}", "not a JSON value"),
            ("{\"a\":01}", "no ',' or '}' after a member"),
            ("{\"a\":+1}", "not a JSON value"),
            ("{\"a\":.5}", "not a JSON value"),
            ("{\"a\":5.}", "a fraction without digits"),
            ("{\"a\":1e}", "an exponent without digits"),
            ("{\"a\":-}", "a number without digits"),
            ("{\"a\":[1,]}", "not a JSON value"),
            (
                "{\"a\":\"\t\"}",
                "a control character (U+0009) not escaped in a string",
            ),
            ("{\"a\":\"\\x\"}", "an escape JSON does not have"),
            ("{\"a\":\"\\u12\"}", "a \\u escape without four hex digits"),
            ("{\"a\":\"\\ud800\"}", "a lone surrogate escape"),
            ("{\"a\":\"\\udc00\\ud800\"}", "a lone surrogate escape"),
            ("{\"a\":\"\\ud800\\u0041\"}", "a lone surrogate escape"),
            ("{\"\\ud800\":1}", "a lone surrogate escape"),
            ("{\"a\":[\"\\udfff\"]}", "a lone surrogate escape"),
            ("{\"a\":1,\"a\":2}", "the member \"a\" is named twice"),
            ("{\"a\":1,\"\\u0061\":2}", "the member \"a\" is named twice"),
            (
                "{\"x\":{\"a\":1,\"a\":1}}",
                "the member \"a\" is named twice",
            ),
            ("{\"a\":\"x", "the text ends inside a string"),
            ("{\"a\":", "the text ends inside the object"),
            (&deeper, "nested deeper than 64"),
        ] {
            assert_eq!(members(text), Err(why.to_owned()), "{text:?}");
        }
    }

    #[test]
    fn a_surrogate_pair_is_one_character_and_escapes_decode() {
        let got = members("{\"a\":\"\\uD83D\\ude00\\u00e9\\n\\b\\f\\r\\t\\\"\\\\\"}").unwrap();
        assert_eq!(got[0].1, Json::String("😀é\n\u{8}\u{c}\r\t\"\\".into()));
    }

    #[test]
    fn a_repeated_member_of_a_request_takes_its_last_value() {
        let got = object("{\"a\":1,\"b\":2,\"a\":3}", Repeats::LastCounts).unwrap();
        assert_eq!(
            got,
            [
                ("a".into(), Json::Number("3")),
                ("b".into(), Json::Number("2"))
            ]
        );
    }

    #[test]
    fn numbers_keep_their_text_and_integers_their_exact_value() {
        let got = members("{\"a\":-0,\"b\":1.0,\"c\":3e4,\"d\":1E+400,\"e\":-12.5e-3}").unwrap();
        let texts: Vec<&Json> = got.iter().map(|(_, v)| v).collect();
        assert_eq!(
            texts,
            [
                &Json::Number("-0"),
                &Json::Number("1.0"),
                &Json::Number("3e4"),
                &Json::Number("1E+400"),
                &Json::Number("-12.5e-3")
            ]
        );
        assert_eq!(integer("-0"), Some(0));
        assert_eq!(integer("8000000000000000"), Some(8_000_000_000_000_000));
        assert_eq!(integer("1.0"), None);
        assert_eq!(integer("3e4"), None);
        assert_eq!(integer(&"9".repeat(60)), Some(i128::MAX));
        assert_eq!(integer(&format!("-{}", "9".repeat(60))), Some(i128::MIN));
    }

    /// Any JSON value serde_json can write, a few levels deep.
    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        // What a correct writer writes is never refused: any object of unique names, any
        // strings (escaped as serde_json escapes them), any numbers, a few levels deep, reads
        // back member by member as written.
        #[test]
        fn every_object_a_correct_writer_writes_is_read_as_written(
            members in proptest::collection::btree_map(proptest::prelude::any::<String>(), any_json(), 0..6),
            pretty: bool,
        ) {
            let value = serde_json::Value::Object(members.clone().into_iter().collect());
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            let read = object(&text, Repeats::Refused).unwrap();
            proptest::prop_assert_eq!(read.len(), members.len());
            for ((name, got), (want_name, want)) in read.iter().zip(&members) {
                proptest::prop_assert_eq!(name.as_ref(), want_name.as_str());
                match (got, want) {
                    (Json::Null, serde_json::Value::Null) => {}
                    (Json::Bool(g), serde_json::Value::Bool(w)) => proptest::prop_assert_eq!(g, w),
                    (Json::String(g), serde_json::Value::String(w)) => {
                        proptest::prop_assert_eq!(g.as_ref(), w.as_str())
                    }
                    (Json::Number(g), serde_json::Value::Number(w)) => {
                        proptest::prop_assert_eq!(g.parse::<f64>().unwrap(), w.as_f64().unwrap())
                    }
                    (Json::Nested, serde_json::Value::Array(_) | serde_json::Value::Object(_)) => {}
                    (got, want) => proptest::prop_assert!(false, "{got:?} for {want:?}"),
                }
            }
        }
    }
}
