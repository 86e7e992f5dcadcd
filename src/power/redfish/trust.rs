//! How a BMC's certificate is trusted (SPEC §4.10): the one rustls verifier every
//! Redfish TLS connection uses, and the words of its refusals.
//!
//! - `insecure: true`: any certificate.
//! - `tls_fingerprint`: exactly the certificate whose DER bytes have that SHA-256, and nothing
//!   else; its name, dates, issuer and basicConstraints are not looked at.
//! - `ca_file`: a presented certificate byte-equal (DER) to one in the file is pinned: trusted as
//!   itself, whatever its basicConstraints (the self-signed certificate a BMC presents is CA:TRUE
//!   as `openssl req -x509` makes it, which a chain refuses as `CaUsedAsEndEntity`) and its
//!   dates, for the endpoint's host name only. Any other certificate is verified as a chain to
//!   the file's certificates, exactly as without pins.
//! - neither: a chain to the system's roots.
//!
//! In every case the handshake's signature is verified with the presented certificate's key, so
//! the peer holds the key of the certificate it showed. A refusal carries the presented
//! certificate's SHA-256, so the error says what was presented and how to pin it. The CA file is
//! read when the verifier is built; verifying does no I/O.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::power::redfish::config::TlsFingerprint;
use crate::power::redfish::target::{Endpoint, RedfishTarget, TargetError};

/// The verifier of one BMC's certificate.
#[derive(Debug)]
pub struct Verifier {
    trust: Trust,
    /// The provider's signature algorithms, for the handshake's signature in every case.
    algorithms: WebPkiSupportedAlgorithms,
}

/// What the presented certificate is checked against.
#[derive(Debug)]
enum Trust {
    /// `insecure: true`.
    Any,
    /// `tls_fingerprint`.
    Fingerprint(TlsFingerprint),
    /// `ca_file`, or the system's roots (with no pins).
    Chain {
        pinned: Vec<CertificateDer<'static>>,
        chain: Arc<WebPkiServerVerifier>,
    },
}

/// Why a presented certificate was refused, and what it was.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The SHA-256 of the certificate the BMC presented.
    pub presented: TlsFingerprint,
    pub why: Why,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Why {
    /// Not pinned, and no chain to the CA file or the system's roots (webpki's reason).
    Chain(CertificateError),
    /// Pinned in `ca_file`, and not for the endpoint's host (webpki's reason).
    PinnedName(CertificateError),
    /// Another certificate than the one `tls_fingerprint` names.
    Fingerprint(TlsFingerprint),
}

impl Verifier {
    /// The verifier for a checked target: reads its CA file, or takes the system's roots.
    pub fn new(
        target: &RedfishTarget,
        endpoint: &Endpoint,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Verifier, TargetError> {
        // `RedfishTarget::parse` refused any two of the three together, so at most one is given
        // here; the order of the arms only makes the match total.
        let trust = match (target.insecure, target.tls_fingerprint, &target.ca_file) {
            (true, _, _) => Trust::Any,
            (false, Some(fingerprint), _) => Trust::Fingerprint(fingerprint),
            (false, None, Some(path)) => {
                Trust::ca_file(ca_file(path)?, provider).map_err(|why| TargetError::CaFileBad {
                    path: path.to_path_buf(),
                    why,
                })?
            }
            (false, None, None) => {
                let no_roots = || TargetError::NoSystemRoots {
                    endpoint: endpoint.name.clone(),
                };
                let roots = system_roots();
                if roots.is_empty() {
                    return Err(no_roots());
                }
                let chain = chain(roots.clone(), provider).map_err(|_| no_roots())?;
                Trust::Chain {
                    pinned: Vec::new(),
                    chain,
                }
            }
        };
        Ok(Verifier {
            trust,
            algorithms: provider.signature_verification_algorithms,
        })
    }
}

impl Trust {
    /// The certificates of a CA file: each is pinned, and each is a root of the chains.
    fn ca_file(
        pinned: Vec<CertificateDer<'static>>,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, String> {
        let mut roots = RootCertStore::empty();
        for cert in &pinned {
            roots
                .add(cert.clone())
                .map_err(|e| format!("a certificate in it cannot be used ({e})"))?;
        }
        let chain = chain(Arc::new(roots), provider)?;
        Ok(Trust::Chain { pinned, chain })
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.trust {
            Trust::Any => Ok(ServerCertVerified::assertion()),
            Trust::Fingerprint(want) => {
                let presented = fingerprint(end_entity);
                if presented == *want {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(refused(presented, Why::Fingerprint(*want)))
                }
            }
            Trust::Chain { pinned, chain } => {
                if pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
                    // SPEC §4.10: a pinned certificate is trusted as itself; its dates are what
                    // the owner pinned, and its name still binds it to this endpoint, so that
                    // one BMC's certificate in a shared file cannot stand in for another's.
                    let parsed = ParsedCertificate::try_from(end_entity)?;
                    return match rustls::client::verify_server_name(&parsed, server_name) {
                        Ok(()) => Ok(ServerCertVerified::assertion()),
                        Err(rustls::Error::InvalidCertificate(e)) => {
                            Err(refused(fingerprint(end_entity), Why::PinnedName(e)))
                        }
                        Err(other) => Err(other),
                    };
                }
                chain
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                    .map_err(|error| match error {
                        rustls::Error::InvalidCertificate(e) => {
                            refused(fingerprint(end_entity), Why::Chain(e))
                        }
                        other => other,
                    })
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The SHA-256 of a certificate's DER bytes.
pub fn fingerprint(cert: &[u8]) -> TlsFingerprint {
    TlsFingerprint(Sha256::digest(cert).into())
}

/// The refusal as rustls carries it to the handshake's error.
fn refused(presented: TlsFingerprint, why: Why) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Refusal {
        presented,
        why,
    }))))
}

/// The [`Refusal`] inside a handshake's error, when this verifier refused.
pub fn refusal(error: &rustls::Error) -> Option<&Refusal> {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(other))) => {
            other.downcast_ref::<Refusal>()
        }
        _ => None,
    }
}

impl Refusal {
    /// The sentence for the operator: why, what was presented, and how to pin it. A fingerprint
    /// offered here is to be compared with the BMC's own before it is written: the peer that
    /// presented it may not be the BMC.
    pub fn explain(&self) -> String {
        let presented = self.presented;
        match &self.why {
            Why::Chain(e) => format!(
                "its TLS certificate was refused (invalid peer certificate: {}); it presented \
                 {presented}: if that is the BMC's own certificate (compare it on the BMC), pin \
                 it with tls_fingerprint: {presented} or put the certificate in ca_file; else \
                 give the CA that signed it in ca_file",
                reason(e)
            ),
            Why::PinnedName(e) => format!(
                "its TLS certificate is the one pinned in ca_file, and it is not for this \
                 endpoint's host ({}); pin it with tls_fingerprint: {presented} instead, which \
                 checks no name, or give the BMC a certificate for its host",
                reason(e)
            ),
            Why::Fingerprint(want) => format!(
                "its TLS certificate was refused: it presented {presented}, and tls_fingerprint \
                 is {want}; if the BMC's certificate was replaced (compare it on the BMC), set \
                 tls_fingerprint: {presented}"
            ),
        }
    }
}

/// webpki's reason: its own name for the errors rustls has no variant for
/// (`CaUsedAsEndEntity`), rustls's words for the others.
fn reason(error: &CertificateError) -> String {
    match error {
        CertificateError::Other(OtherError(inner)) => inner.to_string(),
        other => rustls::Error::InvalidCertificate(other.clone())
            .to_string()
            .trim_start_matches("invalid peer certificate: ")
            .to_string(),
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.explain())
    }
}

impl std::error::Error for Refusal {}

/// A verifier of chains to `roots`, with the provider's algorithms.
fn chain(
    roots: Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| e.to_string())
}

/// The certificates of a PEM file, in its order.
fn ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TargetError> {
    let bad = |why: String| TargetError::CaFileBad {
        path: path.to_path_buf(),
        why,
    };
    use fleet_redis::file::{self, ReadError};
    // Read to a bound (SPEC §7 S10): past it, a file that is no CA bundle.
    let pem = file::read(path, file::PEM).map_err(|e| match e {
        ReadError::Io(source) => TargetError::CaFileUnreadable {
            path: path.to_path_buf(),
            source,
        },
        ReadError::TooLarge { limit, .. } => bad(format!("it holds {limit}")),
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("it is not PEM ({e})")))?;
    if certs.is_empty() {
        return Err(bad("it holds no certificate".to_string()));
    }
    Ok(certs)
}

/// The system's CA certificates, read once per process (they are many files, and read the
/// same every time).
fn system_roots() -> &'static Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        Arc::new(roots)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    // The fixtures, made once by OpenSSL 3.0 with P-256 keys, valid from 2026-12-03 to
    // 2126-11-09 (the tests pass their own `now`):
    // - pin, twin: `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
    //   -days 36500 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1`, twice: the same
    //   name, two keys, CA:TRUE as `req -x509` makes it by default.
    // - ca: the same with `-subj /CN=fleet-test-ca` and no SAN; leaf: a key for 127.0.0.1
    //   (subjectAltName=IP:127.0.0.1, no basicConstraints) signed by ca with `openssl x509 -req`.
    const PIN: &[u8] = include_bytes!("testdata/pin.pem");
    const TWIN: &[u8] = include_bytes!("testdata/twin.pem");
    const CA: &[u8] = include_bytes!("testdata/ca.pem");
    const LEAF: &[u8] = include_bytes!("testdata/leaf.pem");
    /// What `openssl x509 -noout -fingerprint -sha256` prints for pin.pem and twin.pem.
    const PIN_OPENSSL: &str = "sha256:48:E7:75:6A:C4:B3:2C:F9:B5:97:98:E9:DC:51:D1:7A:54:17:53:26:6E:2E:4D:14:7C:1D:FD:AE:C5:AD:5A:A6";
    const TWIN_OPENSSL: &str = "sha256:3B:1A:95:85:F4:2F:0D:05:BF:8E:B1:91:4F:C2:40:50:8E:41:60:05:C3:0B:B4:80:BE:60:EB:CF:C3:A1:FF:0E";

    fn der(pem: &[u8]) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem).expect("a fixture is one PEM certificate")
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn verifier(trust: Trust) -> Verifier {
        Verifier {
            trust,
            algorithms: provider().signature_verification_algorithms,
        }
    }

    fn with_ca_file(pems: &[&[u8]]) -> Verifier {
        let certs = pems.iter().map(|pem| der(pem)).collect();
        verifier(Trust::ca_file(certs, &provider()).expect("fixtures are usable roots"))
    }

    /// A year's 1 January, as the verifier's `now`.
    fn year(y: u64) -> UnixTime {
        let days = (1970..y)
            .map(|y| {
                if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) {
                    366
                } else {
                    365
                }
            })
            .sum::<u64>();
        UnixTime::since_unix_epoch(Duration::from_secs(days * 86_400))
    }

    /// What the verifier says of `pem` presented for `host` at `now`: `Ok(())`, or the refusal.
    fn verify(v: &Verifier, pem: &[u8], host: &str, now: UnixTime) -> Result<(), Refusal> {
        let name = ServerName::try_from(host.to_string()).expect("a host name");
        match v.verify_server_cert(&der(pem), &[], &name, &[], now) {
            Ok(_) => Ok(()),
            Err(e) => Err(refusal(&e)
                .cloned()
                .unwrap_or_else(|| panic!("not a refusal: {e:?}"))),
        }
    }

    fn fp(openssl: &str) -> TlsFingerprint {
        openssl.parse().expect("openssl's form")
    }

    #[test]
    fn the_fingerprint_is_the_sha256_openssl_prints() {
        assert_eq!(fingerprint(der(PIN).as_ref()), fp(PIN_OPENSSL));
        assert_eq!(fingerprint(der(TWIN).as_ref()), fp(TWIN_OPENSSL));
        assert_eq!(
            fp(PIN_OPENSSL).to_string(),
            "sha256:48e7756ac4b32cf9b59798e9dc51d17a541753266e2e4d147c1dfdaec5ad5aa6"
        );
    }

    #[test]
    fn a_certificate_pinned_in_ca_file_is_trusted_as_itself_whatever_its_dates() {
        let v = with_ca_file(&[PIN]);
        // The issue: as a chain, the BMC's CA:TRUE certificate is refused as an end entity.
        let Trust::Chain { chain, .. } = &v.trust else {
            panic!("a CA file is a chain with pins");
        };
        let name = ServerName::try_from("127.0.0.1").expect("an IP");
        let refused = chain
            .verify_server_cert(&der(PIN), &[], &name, &[], year(2030))
            .map(|_| ())
            .expect_err("a CA as an end entity");
        assert!(
            format!("{refused:?}").contains("CaUsedAsEndEntity"),
            "{refused:?}"
        );
        // Pinned, it is trusted as itself: before its validity, within it, after it.
        for now in [year(2000), year(2030), year(2200)] {
            assert_eq!(verify(&v, PIN, "127.0.0.1", now), Ok(()));
        }
    }

    #[test]
    fn another_certificate_of_the_same_name_is_refused_naming_what_it_presented() {
        let refusal = verify(&with_ca_file(&[PIN]), TWIN, "127.0.0.1", year(2030))
            .expect_err("not the pinned one");
        assert_eq!(refusal.presented, fp(TWIN_OPENSSL));
        assert!(matches!(refusal.why, Why::Chain(_)), "{refusal:?}");
        let twin = fp(TWIN_OPENSSL);
        assert!(
            refusal
                .explain()
                .starts_with("its TLS certificate was refused (invalid peer certificate: "),
            "{}",
            refusal.explain()
        );
        assert!(
            refusal.explain().ends_with(&format!(
                "it presented {twin}: if that is the BMC's own certificate (compare it on the \
                 BMC), pin it with tls_fingerprint: {twin} or put the certificate in ca_file; \
                 else give the CA that signed it in ca_file"
            )),
            "{}",
            refusal.explain()
        );
    }

    #[test]
    fn a_pinned_certificate_is_trusted_for_its_own_host_only() {
        let v = with_ca_file(&[PIN]);
        for host in ["localhost", "10.0.0.21", "bmc.rack"] {
            let refusal = verify(&v, PIN, host, year(2030)).expect_err(host);
            assert_eq!(refusal.presented, fp(PIN_OPENSSL), "{host}");
            assert!(
                matches!(refusal.why, Why::PinnedName(_)),
                "{host}: {refusal:?}"
            );
            assert!(
                refusal.explain().contains(&format!(
                    "pin it with tls_fingerprint: {} instead, which checks no name",
                    fp(PIN_OPENSSL)
                )),
                "{}",
                refusal.explain()
            );
        }
    }

    #[test]
    fn chains_are_verified_as_before_dates_and_all() {
        let v = with_ca_file(&[CA]);
        assert_eq!(verify(&v, LEAF, "127.0.0.1", year(2030)), Ok(()));
        for (now, want) in [(year(2200), "Expired"), (year(2000), "NotValidYet")] {
            let refusal = verify(&v, LEAF, "127.0.0.1", now).expect_err(want);
            let Why::Chain(e) = &refusal.why else {
                panic!("not a chain's refusal: {refusal:?}");
            };
            assert!(format!("{e:?}").starts_with(want), "{e:?}");
        }
        let refusal = verify(&v, LEAF, "localhost", year(2030)).expect_err("another name");
        assert!(matches!(refusal.why, Why::Chain(_)), "{refusal:?}");
        // The CA does not make its own certificate a server's, nor the pin's.
        assert!(verify(&v, CA, "127.0.0.1", year(2030)).is_err());
        assert!(verify(&v, PIN, "127.0.0.1", year(2030)).is_err());
        // A file with the CA and a pin: both ways hold.
        let both = with_ca_file(&[CA, PIN]);
        assert_eq!(verify(&both, LEAF, "127.0.0.1", year(2030)), Ok(()));
        assert_eq!(verify(&both, PIN, "127.0.0.1", year(2200)), Ok(()));
        assert!(verify(&both, TWIN, "127.0.0.1", year(2030)).is_err());
    }

    #[test]
    fn a_fingerprint_accepts_exactly_its_certificate() {
        let v = verifier(Trust::Fingerprint(fp(PIN_OPENSSL)));
        for (host, now) in [("127.0.0.1", year(2030)), ("localhost", year(2200))] {
            assert_eq!(verify(&v, PIN, host, now), Ok(()), "{host}");
        }
        for other in [TWIN, LEAF, CA] {
            let refusal = verify(&v, other, "127.0.0.1", year(2030)).expect_err("another");
            assert_eq!(refusal.presented, fingerprint(der(other).as_ref()));
            assert_eq!(refusal.why, Why::Fingerprint(fp(PIN_OPENSSL)));
        }
        let refusal = verify(&v, TWIN, "127.0.0.1", year(2030)).expect_err("the twin");
        let (pin, twin) = (fp(PIN_OPENSSL), fp(TWIN_OPENSSL));
        assert_eq!(
            refusal.explain(),
            format!(
                "its TLS certificate was refused: it presented {twin}, and tls_fingerprint is \
                 {pin}; if the BMC's certificate was replaced (compare it on the BMC), set \
                 tls_fingerprint: {twin}"
            )
        );
    }

    #[test]
    fn insecure_accepts_any_certificate() {
        let v = verifier(Trust::Any);
        for pem in [PIN, TWIN, CA, LEAF] {
            assert_eq!(verify(&v, pem, "localhost", year(2200)), Ok(()));
        }
    }
}
