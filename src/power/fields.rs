//! A driver's configuration as the file gives it (SPEC §4.10, `docs/drivers.md`): a group's
//! `driver` gives defaults, a slot's `driver` overrides them field by field, and each driver
//! reads its own fields from the two with the checks of its `config` module.
//!
//! What lives here is what every driver shares: an entry as written (`Written`: its `type`, its
//! `off`, the refused `password`, and every other field as text), the merge of a slot's entry
//! over its group's, the problems said at the place each value came from (a group's default
//! said once, however many slots take it), and the fields several drivers take (`username`, the
//! password's source). Which types there are is the registry's (`power::KINDS`). Pure: no I/O,
//! no environment; whether a password file or variable exists is asked at start and on reload
//! (`drive::check`).

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::domain::name::check_env_name;

/// One type of driver as the registry lists it, described by its own `config` module.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// Its `type`, as the file spells it.
    pub name: &'static str,
    /// How a list of the types shows it (`wol (Wake-on-LAN)`).
    pub shown: &'static str,
    /// Its fields (but `type` and `off`), in the order a message lists them.
    pub fields: &'static [&'static str],
    /// The fields that are one choice: an entry that gives any of them gives the whole choice,
    /// so a slot's replaces its group's (`password_file` or `password_env`).
    pub choices: &'static [&'static [&'static str]],
}

/// A type of driver and how its configuration is read into `T` (the registry's `DriverKind`).
pub struct Registered<T> {
    pub kind: Kind,
    pub read: fn(&mut Fields<'_, '_>) -> Option<T>,
}

/// The password's source, one choice of two fields (`password_file` or `password_env`).
pub const PASSWORD: &[&str] = &["password_file", "password_env"];

/// Who sends a power-off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffBy {
    /// The driver's own protocol.
    #[default]
    Driver,
    /// The bench's own agent, asked through the store (`fleet agent --power-off-command`).
    Agent,
}

/// Where a password is: read when an operation runs, never written in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// A file whose first line is the password.
    File(PathBuf),
    /// An environment variable of `fleet serve` (and so of its operation wrapper).
    Env(String),
}

impl fmt::Display for SecretSource {
    /// Where, never what: `password_file /etc/fleet/bmc-password`, `password_env IPMI_PASS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File(path) => write!(f, "password_file {}", path.display()),
            SecretSource::Env(name) => write!(f, "password_env {name}"),
        }
    }
}

/// One driver entry as the file writes it, on a group (defaults) or a slot (overrides). Read by
/// serde against the keys the registry knows (its `Deserialize` is beside `power::KINDS`): a
/// key that no type of driver takes ends the read, naming it, so a typo never becomes a
/// default. Every value is read as text (a plain `~` is no value) and checked by the driver
/// that takes it, at its place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub kind: Option<String>,
    pub off: Option<String>,
    /// `password:` was written: refused with its own message; its value is never read.
    pub password: bool,
    /// Every other field, by name, with its text, in the file's order.
    pub fields: Vec<(&'static str, String)>,
}

impl Written {
    /// The text of field `name`, when the entry gives it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, text)| text.as_str())
    }

    /// Reads an entry whose keys are `type`, `off`, `password` and the fields in `known` (which
    /// holds them all, for the message that names an unknown key).
    pub fn read<'de, D: Deserializer<'de>>(
        d: D,
        known: &'static [&'static str],
    ) -> Result<Self, D::Error> {
        d.deserialize_map(Entry(known))
    }
}

struct Entry(&'static [&'static str]);

impl<'de> Visitor<'de> for Entry {
    type Value = Written;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a driver: a mapping of its type and its fields")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Written, A::Error> {
        let mut written = Written::default();
        let mut seen: Vec<&'static str> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Some(&name) = self.0.iter().find(|k| **k == key) else {
                return Err(de::Error::unknown_field(&key, self.0));
            };
            if seen.contains(&name) {
                return Err(de::Error::duplicate_field(name));
            }
            seen.push(name);
            match name {
                "type" => written.kind = map.next_value()?,
                "off" => written.off = map.next_value()?,
                "password" => written.password = map.next_value::<Option<IgnoredAny>>()?.is_some(),
                _ => {
                    if let Some(text) = map.next_value::<Option<String>>()? {
                        written.fields.push((name, text));
                    }
                }
            }
        }
        Ok(written)
    }
}

/// Every key a driver entry may have: `type`, `off`, `password`, and each type's fields, once.
pub fn keys<T>(kinds: &[Registered<T>]) -> Vec<&'static str> {
    let mut keys = vec!["type", "off", "password"];
    for field in kinds.iter().flat_map(|r| r.kind.fields) {
        if !keys.contains(field) {
            keys.push(field);
        }
    }
    keys
}

/// An entry with the place it is written at (`groups[0] (rack).driver`, `slots[2] (n1).driver`).
#[derive(Clone, Copy)]
pub struct Given<'a> {
    pub written: &'a Written,
    pub place: &'a str,
}

/// Where the problems of the file are said: each at its place, and a problem said already (a
/// group's default that each of its slots takes) not again.
pub trait Said {
    fn once(&mut self, place: String, message: String);
}

/// The problems of one driver, and whether it had any (said now, or already).
struct Saying<'s> {
    said: &'s mut dyn Said,
    failed: bool,
}

impl Saying<'_> {
    fn say(&mut self, place: String, message: impl Into<String>) {
        self.failed = true;
        self.said.once(place, message.into());
    }
}

/// The fields a driver reads: its slot's entry over its group's (each choice whole from the one
/// entry that gives it), each value with the place it came from.
pub struct Fields<'a, 's> {
    kind: Kind,
    values: Vec<(&'static str, &'a str, &'a str)>,
    /// The driver's own place, where what is missing is said (`slots[2] (n1).driver`).
    place: &'a str,
    /// A slot's whole driver, not a group's defaults read alone: only then is what is missing,
    /// or what the fields say together, a problem.
    whole: bool,
    off: OffBy,
    saying: &'a mut Saying<'s>,
}

impl<'a> Fields<'a, '_> {
    /// Who powers the machine off.
    pub fn off(&self) -> OffBy {
        self.off
    }

    /// Whether an entry gives field `name`.
    pub fn given(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    fn find(&self, name: &str) -> Option<(&'a str, &'a str)> {
        self.values
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, text, at)| (text, at))
    }

    /// Field `name` read by `parse`: `Some(None)` when no entry gives it, `None` when its value
    /// is refused (said at the place of the value, with `parse`'s words).
    pub fn optional<T>(
        &mut self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<Option<T>> {
        let Some((text, at)) = self.find(name) else {
            return Some(None);
        };
        match parse(text) {
            Ok(value) => Some(Some(value)),
            Err(message) => {
                self.saying.say(format!("{at}.{name}"), message);
                None
            }
        }
    }

    /// A field the driver needs: when no entry gives it, that is said at the driver's place with
    /// `what` it is.
    pub fn required<T>(
        &mut self,
        name: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.optional(name, parse)?;
        if value.is_none() {
            self.missing(name, what);
        }
        value
    }

    /// `field` (a name, or `a or b`) is given by no entry: `a redfish driver needs endpoint: the
    /// BMC's URL, like https://10.0.0.21 (here or in the group's driver)`.
    pub fn missing(&mut self, field: &str, what: &str) {
        if self.whole {
            let name = self.kind.name;
            let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            self.saying.say(
                self.place.to_owned(),
                format!(
                    "{article} {name} driver needs {field}: {what} (here or in the group's driver)"
                ),
            );
        }
    }

    /// A rule of the whole driver about the value of `name`, said at the place of the value
    /// (once, however many slots take it).
    pub fn reject(&mut self, name: &str, message: impl Into<String>) {
        if let (true, Some((_, at))) = (self.whole, self.find(name)) {
            self.saying.say(format!("{at}.{name}"), message);
        }
    }

    /// A rule of the whole driver, said at its `field` (`slots[2] (n1).driver.off`).
    pub fn refuse(&mut self, field: &str, message: impl Into<String>) {
        if self.whole {
            self.saying.say(format!("{}.{field}", self.place), message);
        }
    }

    /// Two fields of one choice given together, said at the place of the entry that gives
    /// `name`: checked wherever the entry is, since one of the two would be ignored.
    pub fn clash(&mut self, name: &str, message: impl Into<String>) {
        if let Some((_, at)) = self.find(name) {
            self.saying.say(at.to_owned(), message);
        }
    }
}

/// `a, b or c`.
pub fn listed<'w>(words: impl IntoIterator<Item = &'w str>) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// A group's `driver` read alone: the values it gives are checked where they are, even when no
/// slot takes them; whether they make a whole driver is each slot's question. An entry without
/// a `type` is read with each slot that takes it.
pub fn defaults<T>(kinds: &[Registered<T>], group: Given<'_>, said: &mut dyn Said) {
    let mut saying = Saying {
        said,
        failed: false,
    };
    let (registered, off) = entry(kinds, group, &mut saying);
    if let Some(registered) = registered {
        let mut fields = Fields {
            kind: registered.kind,
            values: merged(registered.kind, None, Some(group)),
            place: group.place,
            whole: false,
            off,
            saying: &mut saying,
        };
        (registered.read)(&mut fields);
    }
}

/// A slot's driver and who powers its machine off: its group's defaults with the slot's fields
/// over them; `Some(None)` when neither gives one, `None` when it has a problem (said).
///
/// A slot that names another type than its group's takes none of the group's fields: they were
/// meant for another protocol. A field the driver's type does not take is a problem at the
/// place of the entry that gives it.
pub fn read<T>(
    kinds: &[Registered<T>],
    group: Option<Given<'_>>,
    slot: Option<Given<'_>>,
    place: &str,
    said: &mut dyn Said,
) -> Option<Option<(T, OffBy)>> {
    let mut saying = Saying {
        said,
        failed: false,
    };
    if let Some(slot) = slot {
        entry(kinds, slot, &mut saying);
    }
    fn kind_of(g: Option<Given<'_>>) -> Option<&str> {
        g.and_then(|g| g.written.kind.as_deref())
    }
    let group = match (kind_of(group), kind_of(slot)) {
        (Some(g), Some(s)) if g != s => None,
        _ => group,
    };
    if group.is_none() && slot.is_none() {
        return Some(None);
    }
    let Some(name) = kind_of(slot).or(kind_of(group)) else {
        saying.say(
            format!("{place}.type"),
            format!(
                "the driver has no type: give type: {} (here or in the group's driver)",
                shown(kinds)
            ),
        );
        return None;
    };
    // A type or an off that is refused was said where it is written: the slot's just above,
    // the group's with its defaults.
    let registered = kinds.iter().find(|r| r.kind.name == name)?;
    foreign_fields(registered.kind, [slot, group], &mut saying);
    let off = match [slot, group]
        .into_iter()
        .flatten()
        .find_map(|g| g.written.off.as_deref())
    {
        None => OffBy::Driver,
        Some(text) => off_by(text).ok()?,
    };
    let mut fields = Fields {
        kind: registered.kind,
        values: merged(registered.kind, slot, group),
        place,
        whole: true,
        off,
        saying: &mut saying,
    };
    let driver = (registered.read)(&mut fields);
    if saying.failed {
        return None;
    }
    Some(Some((driver?, off)))
}

/// What one entry says of itself wherever it is written: no password, a type the registry
/// knows, an off; the type (when given and known) and the off (the default when not given).
fn entry<'k, T>(
    kinds: &'k [Registered<T>],
    given: Given<'_>,
    saying: &mut Saying<'_>,
) -> (Option<&'k Registered<T>>, OffBy) {
    let Given { written, place } = given;
    if written.password {
        saying.say(
            format!("{place}.password"),
            "a password is never written in the configuration: give password_file (a file \
             holding it, readable by fleet serve) or password_env (the name of an environment \
             variable of fleet serve)",
        );
    }
    let registered = written.kind.as_deref().and_then(|text| {
        let found = kinds.iter().find(|r| r.kind.name == text);
        if found.is_none() {
            saying.say(
                format!("{place}.type"),
                format!("invalid driver type {text:?}: the type is {}", shown(kinds)),
            );
        }
        found
    });
    let off = match written.off.as_deref().map(off_by) {
        None => OffBy::Driver,
        Some(Ok(off)) => off,
        Some(Err(message)) => {
            saying.say(format!("{place}.off"), message);
            OffBy::Driver
        }
    };
    (registered, off)
}

fn off_by(text: &str) -> Result<OffBy, String> {
    match text {
        "agent" => Ok(OffBy::Agent),
        "driver" => Ok(OffBy::Driver),
        _ => Err(format!(
            "invalid off {text:?}: agent (the bench's own fleet agent powers the machine off) or \
             driver (the driver's own power-off, the default)"
        )),
    }
}

/// The types, as a message lists them: `wol (Wake-on-LAN), redfish or ipmi`.
fn shown<T>(kinds: &[Registered<T>]) -> String {
    listed(kinds.iter().map(|r| r.kind.shown))
}

/// A field the driver's type does not take, at the place of the entry that gives it.
fn foreign_fields(kind: Kind, entries: [Option<Given<'_>>; 2], saying: &mut Saying<'_>) {
    for given in entries.into_iter().flatten() {
        for (field, _) in &given.written.fields {
            if !kind.fields.contains(field) {
                saying.say(
                    format!("{}.{field}", given.place),
                    format!(
                        "{field} does not apply to a {} driver: it takes {}, off",
                        kind.name,
                        kind.fields.join(", ")
                    ),
                );
            }
        }
    }
}

/// The values of the type's fields: the slot's over the group's, each choice whole from the
/// first entry that gives any of its fields.
fn merged<'a>(
    kind: Kind,
    slot: Option<Given<'a>>,
    group: Option<Given<'a>>,
) -> Vec<(&'static str, &'a str, &'a str)> {
    let mut values = Vec::new();
    for name in kind.fields {
        let choice = kind
            .choices
            .iter()
            .copied()
            .find(|c| c.contains(name))
            .unwrap_or(std::slice::from_ref(name));
        let from = [slot, group]
            .into_iter()
            .flatten()
            .find(|g| choice.iter().any(|f| g.written.get(f).is_some()));
        if let Some(g) = from
            && let Some(text) = g.written.get(name)
        {
            values.push((*name, text, g.place));
        }
    }
    values
}

/// `username`, which a driver that logs in to a BMC needs: not empty, no control character.
pub fn username(fields: &mut Fields<'_, '_>) -> Option<String> {
    fields.required("username", "the BMC user fleet logs in as", |text| {
        if text.trim().is_empty() || text.chars().any(char::is_control) {
            return Err(
                "the username is empty or has a control character: give the BMC user \
                        fleet logs in as, like admin"
                    .to_owned(),
            );
        }
        Ok(text.to_owned())
    })
}

/// Where the password is: `password_file` or `password_env`, one choice (`PASSWORD`), never the
/// password itself. A variable fleet keeps for itself is refused: the wrapper starts without
/// fleet's own `FLEET_` variables, so a password there would never reach it.
pub fn password(fields: &mut Fields<'_, '_>) -> Option<SecretSource> {
    if fields.given("password_file") && fields.given("password_env") {
        fields.clash(
            "password_file",
            "both password_file and password_env: the password comes from one of them; keep one",
        );
        return None;
    }
    let file = fields.optional("password_file", |text| {
        path(text, "the file holding the password")
    });
    let env = fields.optional("password_env", |name| {
        check_env_name(name).map(|()| name.to_owned())
    });
    match (file?, env?) {
        (Some(file), _) => Some(SecretSource::File(file)),
        (None, Some(name)) => Some(SecretSource::Env(name)),
        (None, None) => {
            fields.missing(
                "password_file or password_env",
                "where the BMC's password is (a file, or an environment variable of fleet \
                 serve); never the password itself",
            );
            None
        }
    }
}

/// A path fleet reads when the driver runs: not empty, no NUL.
pub fn path(text: &str, what: &str) -> Result<PathBuf, String> {
    if text.trim().is_empty() || text.contains('\0') {
        return Err(format!(
            "the path is empty or holds a NUL: give the path of {what}, like /etc/fleet/…"
        ));
    }
    Ok(PathBuf::from(text))
}

/// `true` or `false` (YAML's older words too: `yes`, `no`, `on`, `off`, `y`, `n`), in any case.
pub fn boolean(name: &str, text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "on" => Ok(true),
        "false" | "no" | "n" | "off" => Ok(false),
        _ => Err(format!("invalid {name} {text:?}: true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_as_a_sentence() {
        assert_eq!(listed([]), "");
        assert_eq!(listed(["wol"]), "wol");
        assert_eq!(listed(["wol", "ipmi"]), "wol or ipmi");
        assert_eq!(listed(["wol", "redfish", "ipmi"]), "wol, redfish or ipmi");
    }

    #[test]
    fn a_boolean_takes_yamls_words_and_refuses_the_rest() {
        for (text, want) in [
            ("true", true),
            ("Yes", true),
            ("on", true),
            ("FALSE", false),
            ("n", false),
        ] {
            assert_eq!(boolean("insecure", text), Ok(want), "{text}");
        }
        assert_eq!(
            boolean("insecure", "maybe"),
            Err("invalid insecure \"maybe\": true or false".to_owned())
        );
    }
}
