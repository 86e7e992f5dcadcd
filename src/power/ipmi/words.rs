//! What `ipmitool` printed, read: the chassis power reading, and why a call failed, from the
//! words it prints with one `-v` (without it, a refused password, a refused cipher suite and a
//! BMC that never answers all print the same `Unable to establish IPMI v2 / RMCP+ session`).
//! Pure: no I/O. The phrases are ipmitool 1.8's (`lanplus.c`, `ipmi_chassis.c`), checked against
//! `ipmi_sim` by `tests/process/ipmi.rs`.

use crate::power::action::PowerState;

/// Why a call that ipmitool ended with a failure failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The BMC refused the user, the password or the privilege: a retry cannot help.
    Credentials,
    /// The BMC refused the cipher suite in the session's opening.
    CipherSuite,
    /// Nothing answered: no BMC at the address, a firewall, a hung BMC.
    NoAnswer,
    /// Anything else: the BMC answered, with an error of its own.
    Other,
}

/// The RAKP status codes (IPMI 2.0 table 13-15) and the completion code that refuse the user:
/// `RAKP 2 message indicates an error : unauthorized name` for an unknown user, `RAKP 2 HMAC is
/// invalid` for a wrong password.
const CREDENTIALS: [&str; 8] = [
    "unauthorized name",
    "hmac is invalid",
    "invalid integrity check value",
    "unauthorized role",
    "invalid role",
    "invalid name length",
    "unauthorized guid",
    "insufficient privilege level",
];

/// The open-session status codes that refuse the algorithms of the suite sent (`Error in open
/// session response message : invalid authentication algorithm` from a BMC without suite 17).
const CIPHER_SUITE: [&str; 6] = [
    "invalid authentication algorithm",
    "invalid integrity algorithm",
    "invalid confidentiality algorithm",
    "no matching authentication payload",
    "no matching integrity payload",
    "no matching cipher suite",
];

/// What ipmitool prints when its retransmissions went unanswered, or it could not send at all.
const NO_ANSWER: [&str; 4] = [
    "error issuing get channel authentication capabilities request",
    "no response from",
    "error sending open session message",
    "address lookup for",
];

/// The end of every failed session setup. Alone, without a reason above it, it is the BMC
/// refusing the session after answering: the credentials (SPEC §4.10).
const SESSION: &str = "unable to establish ipmi v2 / rmcp+ session";

/// What `-v` adds on every call and says nothing about the outcome: the vendor probe and its
/// usual refusal, and the registry load.
const CHATTER: [&str; 4] = [
    "loading iana pen registry",
    "running get vso capabilities",
    "invalid completion code received: invalid command",
    "discovered ipmb address",
];

/// The longest detail kept from ipmitool's output, so an error stays one readable line.
const MAX_DETAIL: usize = 400;

/// Why the call that printed `output` failed. The reasons are looked for from the most precise:
/// a refusal of the credentials names itself, a refused suite names its algorithm, and only
/// then does the silence of the BMC, or the bare session failure, decide.
pub(super) fn refusal(output: &str) -> Refusal {
    let text = output.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&CREDENTIALS) {
        Refusal::Credentials
    } else if has(&CIPHER_SUITE) {
        Refusal::CipherSuite
    } else if has(&NO_ANSWER) {
        Refusal::NoAnswer
    } else if text.contains(SESSION) {
        Refusal::Credentials
    } else {
        Refusal::Other
    }
}

/// The reading in `chassis power status`'s answer (`Chassis Power is on`), if it is one.
pub(super) fn power_state(stdout: &str) -> Option<PowerState> {
    match stdout.trim().to_lowercase().as_str() {
        "chassis power is on" => Some(PowerState::On),
        "chassis power is off" => Some(PowerState::Off),
        _ => None,
    }
}

/// ipmitool's own words, for an error or the audit: its lines without the chatter of `-v`,
/// joined by `; `, at most `MAX_DETAIL` characters, with `secret` (which it never prints, but an
/// error message is no place to trust that) replaced.
pub(super) fn detail(output: &str, secret: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(|l| l.trim().trim_start_matches("> ").trim())
        .filter(|l| !l.is_empty())
        .filter(|l| {
            let lower = l.to_lowercase();
            !CHATTER.iter().any(|c| lower.starts_with(c))
        })
        .collect();
    let mut text = lines.join("; ");
    if !secret.is_empty() {
        text = text.replace(secret, "<secret>");
    }
    if text.chars().count() > MAX_DETAIL {
        text = text.chars().take(MAX_DETAIL).collect::<String>() + "…";
    }
    if text.is_empty() {
        "no output".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What ipmitool 1.8.19 printed against ipmi_sim (and without any BMC) with `-v`, verbatim.
    const BAD_PASSWORD: &str = "Loading IANA PEN Registry...\n> RAKP 2 HMAC is invalid\n\
                                Error: Unable to establish IPMI v2 / RMCP+ session\n";
    const BAD_USER: &str = "Loading IANA PEN Registry...\n\
        RAKP 2 message indicates an error : unauthorized name\n\
        Error: Unable to establish IPMI v2 / RMCP+ session\n";
    const SUITE_17_REFUSED: &str = "Loading IANA PEN Registry...\n\
        Error in open session response message : invalid authentication algorithm\n\n\
        Error: Unable to establish IPMI v2 / RMCP+ session\n";
    const NOBODY_THERE: &str = "Loading IANA PEN Registry...\nGet Auth Capabilities error\n\
        Error issuing Get Channel Authentication Capabilities request\n\
        Error: Unable to establish IPMI v2 / RMCP+ session\n";
    const SUCCESS_CHATTER: &str = "Loading IANA PEN Registry...\n\
        Running Get VSO Capabilities my_addr 0x20, transit 0, target 0x20\n\
        Invalid completion code received: Invalid command\nDiscovered IPMB address 0x0\n";

    #[test]
    fn each_failure_reads_as_its_reason() {
        for (output, want) in [
            (BAD_PASSWORD, Refusal::Credentials),
            (BAD_USER, Refusal::Credentials),
            (SUITE_17_REFUSED, Refusal::CipherSuite),
            (NOBODY_THERE, Refusal::NoAnswer),
            (
                "> Error: no response from RAKP 1 message\n\
                 Error: Unable to establish IPMI v2 / RMCP+ session",
                Refusal::NoAnswer,
            ),
            (
                "Address lookup for bmc.invalid failed\n\
                 Error: Unable to establish IPMI v2 / RMCP+ session",
                Refusal::NoAnswer,
            ),
            (
                "Error: Unable to establish IPMI v2 / RMCP+ session",
                Refusal::Credentials,
            ),
            (
                "Set Chassis Power Control to Up/On failed: Insufficient privilege level",
                Refusal::Credentials,
            ),
            (
                "Set Chassis Power Control to Up/On failed: Invalid data field in request",
                Refusal::Other,
            ),
            ("", Refusal::Other),
        ] {
            assert_eq!(refusal(output), want, "{output:?}");
        }
    }

    #[test]
    fn only_the_two_status_answers_are_readings() {
        for (stdout, want) in [
            ("Chassis Power is on\n", Some(PowerState::On)),
            ("Chassis Power is off\n", Some(PowerState::Off)),
            ("Chassis Power Control: Up/On\n", None),
            ("", None),
        ] {
            assert_eq!(power_state(stdout), want, "{stdout:?}");
        }
    }

    #[test]
    fn the_detail_keeps_ipmitools_reason_and_drops_the_chatter() {
        assert_eq!(
            detail(BAD_PASSWORD, "hunter2"),
            "RAKP 2 HMAC is invalid; Error: Unable to establish IPMI v2 / RMCP+ session"
        );
        assert_eq!(detail(SUCCESS_CHATTER, "hunter2"), "no output");
    }

    #[test]
    fn the_detail_never_carries_the_secret_and_stays_short() {
        assert_eq!(
            detail("password hunter2 refused", "hunter2"),
            "password <secret> refused"
        );
        let long = detail(&"x".repeat(1000), "hunter2");
        assert_eq!(long.chars().count(), MAX_DETAIL + 1);
    }
}
