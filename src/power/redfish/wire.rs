//! What fleet reads and sends on the Redfish wire, pure: a ComputerSystem's `PowerState` and
//! `ComputerSystem.Reset` action, the single member of `/redfish/v1/Systems`, the `ResetType`
//! chosen for a move, how an answer's status is taken, a BMC's error message, and the polling
//! schedule. No I/O, no clock, no randomness: the caller passes the jitter. A BMC answering
//! garbage gets an `Err` with a sentence saying what was wrong, never a panic.

use std::time::Duration;

use serde_json::Value;

use crate::power::action::PowerState;

/// The prefix every Redfish resource path has (the service root, DSP0266).
pub const SERVICE_ROOT: &str = "/redfish/v1/";

/// The collection whose single member is driven when no system is configured.
pub const SYSTEMS: &str = "/redfish/v1/Systems";

/// What fleet asks `ComputerSystem.Reset` to do: the three moves of SPEC §4.10.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    On,
    SoftOff,
    HardOff,
}

impl Move {
    /// The `ResetType` values that do this move, best first (`On`, else `ForceOn`;
    /// `GracefulShutdown`, else `PushPowerButton`, which is HPE's soft off; `ForceOff`). The first
    /// is the standard one, sent when a BMC lists no allowable values.
    pub fn preferences(self) -> &'static [&'static str] {
        match self {
            Move::On => &["On", "ForceOn"],
            Move::SoftOff => &["GracefulShutdown", "PushPowerButton"],
            Move::HardOff => &["ForceOff"],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Move::On => "power on",
            Move::SoftOff => "graceful power off",
            Move::HardOff => "forced power off",
        }
    }
}

/// The `ResetType` to send for `mv`: the first of its preferences that the system lists, and
/// none when it lists none of them (fleet never sends a value the BMC does not list). With no
/// list, or an empty one, the standard value: sushy reads an empty list as "not said" too.
pub fn choose_reset(mv: Move, allowable: Option<&[String]>) -> Option<&'static str> {
    let preferences = mv.preferences();
    match allowable {
        None | Some([]) => preferences.first().copied(),
        Some(listed) => preferences
            .iter()
            .copied()
            .find(|wanted| listed.iter().any(|value| value == wanted)),
    }
}

/// Whether `reset` may be sent while the system reads `state`. `PushPowerButton` toggles, so it
/// is pressed only on a machine read as on (pressed on one powering off, it could power it back
/// on); every other value names its end state and is safe from any reading.
pub fn safe_from(reset: &str, state: PowerState) -> bool {
    reset != "PushPowerButton" || state == PowerState::On
}

/// What fleet reads from a ComputerSystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct System {
    pub state: PowerState,
    /// `PowerState` as the BMC wrote it (`PoweringOn`, `null`, `absent`), for the audit.
    pub shown: String,
    /// `ResetType@Redfish.AllowableValues` of `#ComputerSystem.Reset`, when listed.
    pub allowable: Option<Vec<String>>,
    /// The action's `target` path, when given; the standard path otherwise.
    pub target: Option<String>,
}

/// Reads a ComputerSystem's body.
pub fn system(body: &[u8]) -> Result<System, String> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the ComputerSystem is not JSON ({e})"))?;
    if !value.is_object() {
        return Err(format!(
            "the ComputerSystem is {}, not an object",
            kind(&value)
        ));
    }
    let (state, shown) = power_state(value.get("PowerState"))?;
    let (allowable, target) = match value.pointer("/Actions/#ComputerSystem.Reset") {
        None => (None, None),
        Some(Value::Object(action)) => (
            allowable_values(action.get("ResetType@Redfish.AllowableValues"))?,
            action.get("target").map(reset_target).transpose()?,
        ),
        Some(other) => {
            return Err(format!(
                "Actions.#ComputerSystem.Reset is {}, not an object",
                kind(other)
            ));
        }
    };
    Ok(System {
        state,
        shown,
        allowable,
        target,
    })
}

/// `PowerState`: `On` and `Off` hold; `PoweringOn`, `PoweringOff`, `Paused`, `Unknown`, null
/// and an absent field are transitional and never count. Case is not held against a
/// BMC. A value that is not a string is garbage.
pub fn power_state(value: Option<&Value>) -> Result<(PowerState, String), String> {
    match value {
        None => Ok((PowerState::Unknown, "absent".to_string())),
        Some(Value::Null) => Ok((PowerState::Unknown, "null".to_string())),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("on") => Ok((PowerState::On, s.clone())),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("off") => Ok((PowerState::Off, s.clone())),
        Some(Value::String(s)) => Ok((PowerState::Unknown, one_line(s, 40))),
        Some(other) => Err(format!("PowerState is {}, not a string", kind(other))),
    }
}

fn allowable_values(value: Option<&Value>) -> Result<Option<Vec<String>>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let Value::Array(items) = value else {
        return Err(format!(
            "ResetType@Redfish.AllowableValues is {}, not a list",
            kind(value)
        ));
    };
    items
        .iter()
        .map(|item| match item {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!(
                "ResetType@Redfish.AllowableValues holds {}, not only strings",
                kind(other)
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The action's target as a path on the configured endpoint: fleet never follows a BMC to
/// another host (a full URL keeps only its path).
fn reset_target(value: &Value) -> Result<String, String> {
    let Value::String(target) = value else {
        return Err(format!(
            "the Reset action's target is {}, not a string",
            kind(value)
        ));
    };
    let path = match target.parse::<hyper::Uri>() {
        Ok(uri) if uri.query().is_none() => uri.path().to_string(),
        _ => String::new(),
    };
    if path.starts_with(SERVICE_ROOT) {
        Ok(path)
    } else {
        Err(format!(
            "the Reset action's target {:?} is not a path under {SERVICE_ROOT}",
            one_line(target, 120)
        ))
    }
}

/// The one member of `/redfish/v1/Systems`: fleet drives a BMC's system only when it has exactly
/// one, or when the configuration names it.
pub fn single_member(body: &[u8]) -> Result<String, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("{SYSTEMS} is not JSON ({e})"))?;
    let Some(Value::Array(members)) = value.get("Members") else {
        return Err(format!("{SYSTEMS} has no Members list"));
    };
    let paths = members
        .iter()
        .map(|member| match member.get("@odata.id") {
            Some(Value::String(id)) if id.starts_with(SERVICE_ROOT) => {
                Ok(id.trim_end_matches('/').to_string())
            }
            _ => Err(format!(
                "{SYSTEMS} lists a member without an @odata.id path under {SERVICE_ROOT}"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match paths.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("{SYSTEMS} lists no system; check the BMC")),
        many => Err(format!(
            "{SYSTEMS} lists {} systems ({}); set system to the one this slot drives",
            many.len(),
            many.iter()
                .take(4)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// How fleet takes the status of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: accepted, not done; the state is polled until it holds.
    Accepted,
    /// 400 or 409: often "already in that state", success once a fresh read confirms it; a 409
    /// on `On` may also be a BMC refusing On shortly after an off, retried for a bounded time.
    Conflict,
    /// 401 or 403: never retried.
    Auth,
    /// Anything else: the BMC will not do it (501 for an unsupported value, 404, a redirect).
    Refused,
}

pub fn answer(status: u16) -> Answer {
    match status {
        200..=299 => Answer::Accepted,
        400 | 409 => Answer::Conflict,
        401 | 403 => Answer::Auth,
        _ => Answer::Refused,
    }
}

/// The message of a Redfish error body (`error.message`, else the first
/// `@Message.ExtendedInfo` `Message`), on one line and short, for an error or the audit.
pub fn message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    let text = match error.get("message") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => error
            .pointer("/@Message.ExtendedInfo/0/Message")?
            .as_str()?
            .to_string(),
    };
    Some(one_line(&text, 200))
}

/// The pauses between reads after a request (jittered backoff; MAAS pauses 1, 2, 2,
/// 4 … s): 0.5, 1, 2, 2, then 4 s each, each scaled by 0.75 to 1.25 by `jitter` (taken from
/// [0, 1), clamped), so BMCs polled together drift apart. A BMC is slow to settle, and a read a
/// second is the most a small BMC should be asked for.
pub fn backoff(poll: u32, jitter: f64) -> Duration {
    const SCHEDULE_MS: [u64; 5] = [500, 1_000, 2_000, 2_000, 4_000];
    let base = SCHEDULE_MS[(poll as usize).min(SCHEDULE_MS.len() - 1)];
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    Duration::from_millis(base).mul_f64(0.75 + 0.5 * jitter)
}

/// Text from a BMC on one line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every value that matters to a move, and one that matters to none.
    const VALUES: [&str; 6] = [
        "On",
        "ForceOn",
        "GracefulShutdown",
        "PushPowerButton",
        "ForceOff",
        "Nmi",
    ];

    /// What the table says the choice is, written apart from `choose_reset`'s code.
    fn expected(mv: Move, listed: &[String]) -> Option<&'static str> {
        let has = |v: &str| listed.iter().any(|l| l == v);
        match mv {
            Move::On if has("On") => Some("On"),
            Move::On if has("ForceOn") => Some("ForceOn"),
            Move::SoftOff if has("GracefulShutdown") => Some("GracefulShutdown"),
            Move::SoftOff if has("PushPowerButton") => Some("PushPowerButton"),
            Move::HardOff if has("ForceOff") => Some("ForceOff"),
            Move::On | Move::SoftOff | Move::HardOff => None,
        }
    }

    #[test]
    fn the_reset_type_is_the_preferred_one_listed_over_every_list() {
        for mask in 0u32..(1 << VALUES.len()) {
            let listed: Vec<String> = VALUES
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, v)| v.to_string())
                .collect();
            for mv in [Move::On, Move::SoftOff, Move::HardOff] {
                let chosen = choose_reset(mv, Some(&listed));
                if listed.is_empty() {
                    assert_eq!(chosen, mv.preferences().first().copied(), "{mv:?} empty");
                    continue;
                }
                assert_eq!(chosen, expected(mv, &listed), "{mv:?} {listed:?}");
                if let Some(value) = chosen {
                    assert!(listed.iter().any(|l| l == value), "{value} is not listed");
                }
            }
        }
    }

    #[test]
    fn with_no_list_the_standard_values_are_sent() {
        assert_eq!(choose_reset(Move::On, None), Some("On"));
        assert_eq!(choose_reset(Move::SoftOff, None), Some("GracefulShutdown"));
        assert_eq!(choose_reset(Move::HardOff, None), Some("ForceOff"));
    }

    #[test]
    fn a_listed_value_is_matched_exactly() {
        let listed = vec!["on".to_string(), "forceoff".to_string()];
        assert_eq!(choose_reset(Move::On, Some(&listed)), None);
        assert_eq!(choose_reset(Move::HardOff, Some(&listed)), None);
    }

    #[test]
    fn the_power_button_is_pressed_only_on_a_machine_read_on() {
        for state in [PowerState::On, PowerState::Off, PowerState::Unknown] {
            assert_eq!(
                safe_from("PushPowerButton", state),
                state == PowerState::On,
                "{state:?}"
            );
            for reset in ["On", "ForceOn", "GracefulShutdown", "ForceOff"] {
                assert!(safe_from(reset, state), "{reset} {state:?}");
            }
        }
    }

    #[test]
    fn power_state_readings_and_garbage() {
        /// A `PowerState` field (absent as `None`), and its reading or the garbage error.
        type Row = (
            Option<Value>,
            Result<(PowerState, &'static str), &'static str>,
        );
        let rows: [Row; 13] = [
            (Some(json!("On")), Ok((PowerState::On, "On"))),
            (Some(json!("Off")), Ok((PowerState::Off, "Off"))),
            (Some(json!("ON")), Ok((PowerState::On, "ON"))),
            (Some(json!("off")), Ok((PowerState::Off, "off"))),
            (
                Some(json!("PoweringOn")),
                Ok((PowerState::Unknown, "PoweringOn")),
            ),
            (
                Some(json!("PoweringOff")),
                Ok((PowerState::Unknown, "PoweringOff")),
            ),
            (Some(json!("Paused")), Ok((PowerState::Unknown, "Paused"))),
            (Some(json!("Unknown")), Ok((PowerState::Unknown, "Unknown"))),
            (Some(json!("On\n")), Ok((PowerState::Unknown, "On"))),
            (Some(Value::Null), Ok((PowerState::Unknown, "null"))),
            (None, Ok((PowerState::Unknown, "absent"))),
            (Some(json!(1)), Err("PowerState is a number, not a string")),
            (
                Some(json!({"On": true})),
                Err("PowerState is an object, not a string"),
            ),
        ];
        for (value, want) in rows {
            let got = power_state(value.as_ref());
            let want = want
                .map(|(s, shown)| (s, shown.to_string()))
                .map_err(str::to_string);
            assert_eq!(got, want, "{value:?}");
        }
    }

    #[test]
    fn a_system_is_read_with_its_reset_action() {
        let body = json!({
            "PowerState": "On",
            "Actions": {"#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]
            }}
        });
        let got = system(body.to_string().as_bytes()).expect("a good system");
        assert_eq!(
            got,
            System {
                state: PowerState::On,
                shown: "On".to_string(),
                allowable: Some(vec!["On".to_string(), "ForceOff".to_string()]),
                target: Some("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset".to_string()),
            }
        );
        let bare = system(br#"{"PowerState": null}"#).expect("no actions is fine");
        assert_eq!(
            (bare.state, bare.allowable, bare.target),
            (PowerState::Unknown, None, None)
        );
    }

    #[test]
    fn a_full_url_target_keeps_only_its_path() {
        let body = json!({"Actions": {"#ComputerSystem.Reset": {
            "target": "https://elsewhere.example/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"
        }}});
        let got = system(body.to_string().as_bytes()).expect("a good system");
        assert_eq!(
            got.target.as_deref(),
            Some("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset")
        );
    }

    #[test]
    fn a_garbage_system_is_an_error_that_says_what() {
        let rows: [(&[u8], &str); 7] = [
            (b"<html>", "the ComputerSystem is not JSON"),
            (b"[1]", "the ComputerSystem is a list, not an object"),
            (br#"{"PowerState": 3}"#, "PowerState is a number"),
            (br##"{"Actions": {"#ComputerSystem.Reset": 1}}"##, "is a number, not an object"),
            (
                br##"{"Actions": {"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": "On"}}}"##,
                "AllowableValues is a string, not a list",
            ),
            (
                br##"{"Actions": {"#ComputerSystem.Reset": {"ResetType@Redfish.AllowableValues": ["On", 2]}}}"##,
                "holds a number, not only strings",
            ),
            (
                br##"{"Actions": {"#ComputerSystem.Reset": {"target": "/elsewhere"}}}"##,
                "target \"/elsewhere\" is not a path under /redfish/v1/",
            ),
        ];
        for (body, want) in rows {
            let got = system(body).expect_err("garbage");
            assert!(got.contains(want), "{got:?} lacks {want:?}");
        }
    }

    #[test]
    fn only_a_single_system_is_taken() {
        let one = json!({"Members": [{"@odata.id": "/redfish/v1/Systems/abc/"}]});
        assert_eq!(
            single_member(one.to_string().as_bytes()),
            Ok("/redfish/v1/Systems/abc".to_string())
        );
        let none = json!({"Members": []});
        assert_eq!(
            single_member(none.to_string().as_bytes()),
            Err("/redfish/v1/Systems lists no system; check the BMC".to_string())
        );
        let two = json!({"Members": [
            {"@odata.id": "/redfish/v1/Systems/1"}, {"@odata.id": "/redfish/v1/Systems/2"}
        ]});
        assert_eq!(
            single_member(two.to_string().as_bytes()),
            Err(
                "/redfish/v1/Systems lists 2 systems (/redfish/v1/Systems/1, \
                 /redfish/v1/Systems/2); set system to the one this slot drives"
                    .to_string()
            )
        );
        for garbage in [
            &b"{}"[..],
            br#"{"Members": [{"@odata.id": 5}]}"#,
            br#"{"Members": [{"@odata.id": "http://x/redfish"}]}"#,
            b"nope",
        ] {
            assert!(single_member(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn statuses_are_taken_by_class() {
        for (status, want) in [
            (200, Answer::Accepted),
            (202, Answer::Accepted),
            (204, Answer::Accepted),
            (400, Answer::Conflict),
            (409, Answer::Conflict),
            (401, Answer::Auth),
            (403, Answer::Auth),
            (307, Answer::Refused),
            (404, Answer::Refused),
            (405, Answer::Refused),
            (500, Answer::Refused),
            (501, Answer::Refused),
        ] {
            assert_eq!(answer(status), want, "{status}");
        }
    }

    #[test]
    fn a_bmc_message_is_read_short_and_on_one_line() {
        let plain = br#"{"error": {"code": "Base.1.0.GeneralError", "message": "Power state PushPowerButton is not supported"}}"#;
        assert_eq!(
            message(plain).as_deref(),
            Some("Power state PushPowerButton is not supported")
        );
        let extended =
            br#"{"error": {"@Message.ExtendedInfo": [{"Message": "The request\nfailed"}]}}"#;
        assert_eq!(message(extended).as_deref(), Some("The request failed"));
        assert_eq!(message(b"<html>oops</html>"), None);
        assert_eq!(message(br#"{"error": {"message": 3}}"#), None);
        let long = format!(r#"{{"error": {{"message": "{}"}}}}"#, "x".repeat(500));
        assert_eq!(
            message(long.as_bytes()).map(|m| m.chars().count()),
            Some(201)
        );
    }

    #[test]
    fn the_backoff_stays_in_its_bounds() {
        let bases = [500u64, 1_000, 2_000, 2_000, 4_000, 4_000, 4_000];
        for (poll, base) in bases.iter().enumerate() {
            let poll = poll as u32;
            assert_eq!(
                backoff(poll, 0.0),
                Duration::from_millis(base * 3 / 4),
                "{poll}"
            );
            assert_eq!(backoff(poll, 0.5), Duration::from_millis(*base), "{poll}");
            assert_eq!(
                backoff(poll, 1.0),
                Duration::from_millis(base * 5 / 4),
                "{poll}"
            );
        }
        for jitter in [-1.0, 2.0, f64::NAN, f64::INFINITY] {
            let got = backoff(9, jitter);
            assert!(
                (Duration::from_millis(3_000)..=Duration::from_millis(5_000)).contains(&got),
                "{jitter}: {got:?}"
            );
        }
        assert_eq!(backoff(u32::MAX, 1.0), Duration::from_millis(5_000));
        for poll in 1..20 {
            assert!(backoff(poll, 0.5) >= backoff(poll - 1, 0.5), "{poll}");
        }
    }
}
