//! The Kubernetes deployment under `deploy/` (deploy/README.md), checked without a cluster.
//!
//! Long: one concern, the manifests, in the order a reader meets them: reading YAML as kubectl
//! does, the round trip of every object through its k8s-openapi type, the files that are not
//! objects, the rendered overlay and how its parts name each other, RBAC, the configuration,
//! secrets, pod security, Redis, cluster-autoscaler and the bench's environment file.
//!
//! k8s-openapi ignores fields it does not know, so a manifest that merely deserializes proves
//! little: every object is read into a `serde_json::Value`, deserialized into its type, serialized
//! back and compared, so a misspelled or misplaced field shows up as a field lost. What this
//! cannot prove, with no API server here: admission (Pod Security, quotas), defaulting and the
//! server's own validation, RBAC as the server evaluates it, and that the pods run. The test that
//! renders the example overlay needs `kubectl` (for its kustomize); without it, it says so and
//! checks nothing, and the other tests still check every source file.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::Resource;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, Namespace, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

// ---------------------------------------------------------------------------------------------
// Reading YAML as kubectl does.

/// The documents of a YAML stream, read as kubectl reads them: a leading zero is YAML 1.1's octal
/// (`defaultMode: 0440` is 288; YAML 1.2 would read 440, another file mode), and `yes`/`no` are
/// booleans (so an unquoted `yes` where a string belongs fails the typed read, as the API server
/// would refuse it). Documents that are only comments are left out.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn read_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every YAML file under `deploy/`, sorted. `secrets/` folders are skipped: they hold the files an
/// operator makes Secrets from (git ignores them), never manifests.
fn yaml_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("secrets") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&deploy(), &mut out);
    out.sort();
    out
}

/// The YAML files under `deploy/` that hold no Kubernetes object, each with the test that checks
/// it instead. Every `kustomization.yaml` is one too (`kustomizations_…`).
const NOT_OBJECTS: &[(&str, &str)] = &[
    (
        "cluster-autoscaler/cloud-config.yaml",
        "cluster-autoscaler's cloud-config: cluster_autoscaler_…",
    ),
    (
        "examples/cluster.yaml",
        "a fleet configuration: the_fleet_configurations_…",
    ),
    (
        "examples/fleet.yaml",
        "a fleet configuration: the_fleet_configurations_…",
    ),
    (
        "examples/ipmi.yaml",
        "a fleet configuration: the_driver_examples_…",
    ),
    (
        "examples/redfish.yaml",
        "a fleet configuration: the_driver_examples_…",
    ),
    (
        "examples/wol-agent.yaml",
        "a fleet configuration: the_driver_examples_…",
    ),
    (
        "overlays/example/fleet.yaml",
        "a fleet configuration: the_fleet_configurations_…",
    ),
];

fn relative(path: &Path) -> String {
    path.strip_prefix(deploy())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every Kubernetes object in the source files, with the file it is in.
fn source_objects() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for path in yaml_files() {
        let rel = relative(&path);
        if path.ends_with("kustomization.yaml") || NOT_OBJECTS.iter().any(|(p, _)| *p == rel) {
            continue;
        }
        for doc in read_documents(&path) {
            out.push((rel.clone(), doc));
        }
    }
    out
}

fn kind(doc: &Value) -> (&str, &str) {
    (
        doc["apiVersion"].as_str().unwrap_or(""),
        doc["kind"].as_str().unwrap_or(""),
    )
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or("")
}

fn namespace(doc: &Value) -> &str {
    doc["metadata"]["namespace"].as_str().unwrap_or("")
}

fn typed<T: DeserializeOwned>(doc: &Value) -> T {
    serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{:?} {}: {e}", kind(doc), name(doc)))
}

// ---------------------------------------------------------------------------------------------
// The round trip.

/// Deserializes `doc` as a `T`, serializes it back, and lists what differs.
fn same<T: Resource + DeserializeOwned + serde::Serialize>(doc: &Value) -> Vec<String> {
    let object: T = match serde_json::from_value(doc.clone()) {
        Ok(o) => o,
        Err(e) => return vec![format!("not a {}: {e}", T::KIND)],
    };
    let back = serde_json::to_value(&object).expect("a k8s-openapi object serializes");
    let mut out = Vec::new();
    differences("", doc, &back, &mut out);
    out
}

/// Reads an object with the type its apiVersion and kind name, and lists what the round trip
/// changed; a kind with no entry here is an error (add its type).
fn round_trip(doc: &Value) -> Vec<String> {
    match kind(doc) {
        ("v1", "Namespace") => same::<Namespace>(doc),
        ("v1", "ServiceAccount") => same::<ServiceAccount>(doc),
        ("v1", "Service") => same::<Service>(doc),
        ("v1", "ConfigMap") => same::<ConfigMap>(doc),
        ("v1", "Secret") => same::<Secret>(doc),
        ("apps/v1", "Deployment") => same::<Deployment>(doc),
        ("apps/v1", "StatefulSet") => same::<StatefulSet>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => same::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => same::<ClusterRoleBinding>(doc),
        ("rbac.authorization.k8s.io/v1", "Role") => same::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => same::<RoleBinding>(doc),
        other => vec![format!(
            "no k8s-openapi type is known here for {other:?}: add it to round_trip"
        )],
    }
}

/// A Secret with its base64 data on one line each. kustomize folds long values over several
/// lines; the API server reads base64 with Go's decoder, which skips line breaks, while
/// k8s-openapi's refuses them: the same bytes either way.
fn unfolded(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(data) = doc.get_mut("data").and_then(Value::as_object_mut) {
        for v in data.values_mut() {
            if let Some(text) = v.as_str() {
                *v = Value::String(text.replace(['\n', '\r'], ""));
            }
        }
    }
    doc
}

/// Where `want` (the manifest) and `got` (its round trip) differ, by path. Two things count as
/// the same because the API server reads them the same: a field set to null and a field left out
/// (k8s-openapi drops nulls), and a number where the type is a Quantity, which k8s-openapi
/// re-serializes as its text (`cpu: 1` comes back `"1"`). Nothing else is forgiven.
fn differences(at: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let path = format!("{at}.{k}");
                match g.get(k) {
                    Some(gv) => differences(&path, wv, gv, out),
                    None if wv.is_null() => {}
                    None => out.push(format!("{path}: lost (unknown to the type, or misplaced)")),
                }
            }
            for k in g.keys().filter(|k| !w.contains_key(*k)) {
                out.push(format!("{at}.{k}: added by the round trip"));
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                differences(&format!("{at}[{i}]"), wv, gv, out);
            }
        }
        (Value::Number(n), Value::String(s)) if n.to_string() == *s => {}
        _ if want == got => {}
        _ => out.push(format!("{at}: {want} became {got}")),
    }
}

#[test]
fn the_round_trip_catches_a_misspelled_field_and_forgives_only_equivalents() {
    let doc = documents(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\n\
         spec:\n  selectr: {app: x}\n  ports: [{port: 80, targetPort: http}]\n",
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        round_trip(&doc),
        [".spec.selectr: lost (unknown to the type, or misplaced)"]
    );
    let doc = documents(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  selector: {}\n  \
         template:\n    spec:\n      containers:\n        - name: c\n          resources: {limits: {cpu: 1}}\n      \
         volumes: [{name: v, secret: {secretName: s, defaultMode: 0440}}]\n      nodeName: ~\n",
    )
    .unwrap()
    .remove(0);
    assert_eq!(round_trip(&doc), Vec::<String>::new());
    assert_eq!(
        doc["spec"]["template"]["spec"]["volumes"][0]["secret"]["defaultMode"], 288,
        "0440 is octal, as kubectl reads it"
    );
    let doc = documents("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
        .unwrap()
        .remove(0);
    assert!(round_trip(&doc)[0].contains("no k8s-openapi type"));
}

#[test]
fn every_object_under_deploy_survives_the_round_trip_through_its_kubernetes_type() {
    let objects = source_objects();
    assert!(objects.len() > 20, "found only {} objects", objects.len());
    let mut failures = Vec::new();
    for (file, doc) in &objects {
        for d in round_trip(doc) {
            failures.push(format!("{file}: {:?} {}: {d}", kind(doc), name(doc)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_yaml_file_under_deploy_is_objects_only_or_checked_its_own_way() {
    let mut seen = BTreeSet::new();
    for path in yaml_files() {
        let rel = relative(&path);
        let objects =
            !path.ends_with("kustomization.yaml") && !NOT_OBJECTS.iter().any(|(p, _)| *p == rel);
        if !objects {
            continue;
        }
        for doc in read_documents(&path) {
            let (api, k) = kind(&doc);
            assert!(
                !api.is_empty() && !k.is_empty(),
                "{rel}: every document of a manifest is an object with apiVersion and kind; a \
                 file of another kind is listed in NOT_OBJECTS with the test that checks it"
            );
            let id = (
                k.to_owned(),
                namespace(&doc).to_owned(),
                name(&doc).to_owned(),
            );
            assert!(seen.insert(id.clone()), "{rel}: {id:?} is declared twice");
        }
    }
    for (listed, _) in NOT_OBJECTS {
        assert!(
            deploy().join(listed).is_file(),
            "NOT_OBJECTS names {listed}, which is gone"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Files that are not objects: kustomizations and cluster-autoscaler's cloud-config.

/// A kustomization, as far as fleet's use it; a field not listed here is refused, so a typo (or a
/// new feature, which then gets its line here) is caught.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    images: Vec<Image>,
    #[serde(default)]
    config_map_generator: Vec<Generator>,
    #[serde(default)]
    secret_generator: Vec<Generator>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // Read only to refuse unknown fields.
struct Image {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Read only to refuse unknown fields.
struct Generator {
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    envs: Vec<String>,
    #[serde(rename = "type")]
    type_: Option<String>,
    options: Option<GeneratorOptions>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // Read only to refuse unknown fields.
struct GeneratorOptions {
    #[serde(default)]
    disable_name_suffix_hash: bool,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[test]
fn kustomizations_use_known_fields_and_name_files_that_exist() {
    let kustomizations: Vec<PathBuf> = yaml_files()
        .into_iter()
        .filter(|p| p.ends_with("kustomization.yaml"))
        .collect();
    assert_eq!(kustomizations.len(), 3, "{kustomizations:?}");
    for path in kustomizations {
        let dir = path.parent().unwrap();
        let k: Kustomization = serde_json::from_value(read_documents(&path).remove(0))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            (k.api_version.as_str(), k.kind.as_str()),
            ("kustomize.config.k8s.io/v1beta1", "Kustomization")
        );
        for resource in &k.resources {
            let target = dir.join(resource);
            assert!(
                target.is_file() || target.join("kustomization.yaml").is_file(),
                "{}: resource {resource} is neither a file nor a kustomization",
                path.display()
            );
        }
        for image in &k.images {
            let used = source_objects().iter().any(|(_, d)| {
                d.to_string()
                    .contains(&format!("\"image\":\"{}\"", image.name))
            });
            assert!(
                used,
                "{}: images names {}, which no container uses",
                path.display(),
                image.name
            );
        }
        for g in k.config_map_generator.iter().chain(&k.secret_generator) {
            assert!(
                g.namespace.is_some(),
                "{}: {} names no namespace",
                path.display(),
                g.name
            );
            for source in g.files.iter().chain(&g.envs) {
                let file = source.rsplit('=').next().unwrap();
                // Files in secrets/ are made by the operator (README step 2), not committed;
                // the rendering test makes them with the README's own commands.
                assert!(
                    file.starts_with("secrets/") || dir.join(file).is_file(),
                    "{}: {} reads {file}, which does not exist",
                    path.display(),
                    g.name
                );
            }
        }
    }
}

/// cluster-autoscaler's cloud-config for externalgrpc: these keys and no other (its reader
/// ignores an unknown key, so a typo would silently drop a setting).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloudConfig {
    address: String,
    cert: String,
    key: String,
    cacert: String,
    grpc_timeout: String,
}

fn cloud_config(text: &str) -> CloudConfig {
    serde_json::from_value(documents(text).unwrap().remove(0)).expect("a cloud-config")
}

fn source_object<'a>(objects: &'a [(String, Value)], k: &str, ns: &str, n: &str) -> &'a Value {
    objects
        .iter()
        .map(|(_, d)| d)
        .find(|d| kind(d).1 == k && namespace(d) == ns && name(d) == n)
        .unwrap_or_else(|| panic!("no {k} {ns}/{n} under deploy/"))
}

#[test]
fn cluster_autoscaler_dials_fleets_service_and_runs_with_its_documented_args() {
    let dir = deploy().join("cluster-autoscaler");
    let config = cloud_config(&std::fs::read_to_string(dir.join("cloud-config.yaml")).unwrap());
    let objects = source_objects();
    // The address is the provider's Service, by the name the certificate is made for.
    let service: Service = typed(source_object(&objects, "Service", "fleet", "fleet"));
    let port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(config.address, format!("fleet.fleet.svc:{}", port.port));
    assert_eq!(port.name.as_deref(), Some("grpc"));
    let readme = std::fs::read_to_string(deploy().join("README.md")).unwrap();
    assert!(
        readme.contains("make-certs.sh \"$s\" fleet.fleet.svc"),
        "the guide's certificate"
    );
    for file in [&config.cert, &config.key, &config.cacert] {
        assert!(file.starts_with("/etc/ssl/client-cert/"), "{file}");
    }
    assert!(!config.grpc_timeout.is_empty());
    // The Deployment's args are the list in cluster-autoscaler-args.txt, reasons aside.
    let listed: Vec<String> = std::fs::read_to_string(dir.join("cluster-autoscaler-args.txt"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("--"))
        .map(|l| l.split("  #").next().unwrap().trim().to_owned())
        .collect();
    let ca: Deployment = typed(source_object(
        &objects,
        "Deployment",
        "kube-system",
        "cluster-autoscaler",
    ));
    let container = &pod_spec(&ca).containers[0];
    assert_eq!(container.args.as_ref().unwrap(), &listed);
    assert!(listed.contains(&"--cloud-provider=externalgrpc".to_owned()));
}

// ---------------------------------------------------------------------------------------------
// The example overlay as kustomize renders it.

/// The commands of README's secrets step, run as an operator would (from the repository's root).
fn guide_secrets_step() -> String {
    let readme = std::fs::read_to_string(deploy().join("README.md")).unwrap();
    let block = readme
        .split("<!-- secrets:begin -->")
        .nth(1)
        .and_then(|s| s.split("<!-- secrets:end -->").next())
        .expect("README.md marks its secrets step");
    block
        .lines()
        .filter(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else if !path.parent().unwrap().ends_with("secrets") || path.ends_with(".gitignore") {
            // An operator's own secrets/ files stay where they are.
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// `kubectl kustomize deploy/overlays/example` in a copy of `deploy/` whose secrets were made by
/// the README's own commands; `None` when kubectl is not installed.
fn render_example() -> Option<Vec<Value>> {
    let Some(kubectl) = which("kubectl") else {
        // Debian (bookworm) ships no kubectl package; its kubernetes-client 1.20 embeds
        // kustomize 2.0.3, which refuses generator `options` ("unknown field"), so
        // scripts/ensure-deps.sh installs none. The other tests check every source file.
        eprintln!(
            "kubectl is not installed: the example overlay was not rendered. Install kubectl \
             1.21 or later (kustomize 4+) to render and check it."
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&deploy(), &dir.path().join("deploy"));
    // `fleet acl` is the fleet built for these tests.
    let fleet_dir = Path::new(env!("CARGO_BIN_EXE_fleet")).parent().unwrap();
    let path = format!("{}:{}", fleet_dir.display(), std::env::var("PATH").unwrap());
    let mut bash = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &guide_secrets_step()])
        .env("PATH", path)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The BMC password the step asks for.
    bash.stdin
        .take()
        .unwrap()
        .write_all(b"bmc-test-password\n")
        .unwrap();
    let o = bash.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "the README's secrets step failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let secrets = dir.path().join("deploy/overlays/example/secrets");
    for file in [
        "redis.env",
        "users.acl",
        "passwords/fleet-controller",
        "bmc-password",
        "server-key.pem",
        "client-key.pem",
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(secrets.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{file} is readable by others: {mode:o}");
    }
    assert!(
        !secrets.join("ca-key.pem").exists(),
        "the CA's key is not left beside the rest"
    );
    let o = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir.path().join("deploy/overlays/example"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "kubectl kustomize (needs kustomize 4+, kubectl 1.21+): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let docs = documents(&String::from_utf8(o.stdout).unwrap()).unwrap();
    Some(
        docs.iter()
            .map(|d| {
                if kind(d).1 == "Secret" {
                    unfolded(d)
                } else {
                    d.clone()
                }
            })
            .collect(),
    )
}

/// The one object of kind `k` in `ns` whose name is `prefix`, with or without the hash kustomize
/// appends to a generated one.
fn find<'a>(objects: &'a [Value], k: &str, ns: &str, prefix: &str) -> &'a Value {
    // kustomize's hash: a dash and ten lowercase letters or digits.
    let hashed = |n: &str| {
        n.strip_prefix(prefix)
            .and_then(|h| h.strip_prefix('-'))
            .is_some_and(|h| {
                h.len() == 10
                    && h.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            })
    };
    let found: Vec<&Value> = objects
        .iter()
        .filter(|d| kind(d).1 == k && namespace(d) == ns)
        .filter(|d| name(d) == prefix || hashed(name(d)))
        .collect();
    match found[..] {
        [one] => one,
        _ => panic!("{} objects {k} {ns}/{prefix}, not one", found.len()),
    }
}

fn pod_spec<T: PodTemplated>(workload: &T) -> &PodSpec {
    workload.pod().expect("a pod template with a spec")
}

trait PodTemplated {
    fn pod(&self) -> Option<&PodSpec>;
}

impl PodTemplated for Deployment {
    fn pod(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

impl PodTemplated for StatefulSet {
    fn pod(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

fn env<'a>(container: &'a Container, var: &str) -> &'a EnvVar {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == var)
        .unwrap_or_else(|| panic!("{} has no {var}", container.name))
}

fn value<'a>(container: &'a Container, var: &str) -> &'a str {
    env(container, var)
        .value
        .as_deref()
        .unwrap_or_else(|| panic!("{var} has no value"))
}

/// The object and the key that a file path inside a container comes from: the volume mounted at
/// the path's folder, and the ConfigMap or Secret behind it.
fn mounted(pod: &PodSpec, container: &Container, file: &str) -> (&'static str, String, String) {
    let (folder, key) = file.rsplit_once('/').unwrap();
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == folder)
        .unwrap_or_else(|| panic!("nothing is mounted at {folder} for {file}"));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap_or_else(|| panic!("no volume {}", mount.name));
    // A volume that lists `items` shows each key under a path of its own.
    let key_at = |items: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>| {
        items
            .iter()
            .flatten()
            .find(|i| i.path == key)
            .map_or(key.to_owned(), |i| i.key.clone())
    };
    if let Some(cm) = &volume.config_map {
        ("ConfigMap", cm.name.clone(), key_at(&cm.items))
    } else if let Some(s) = &volume.secret {
        ("Secret", s.secret_name.clone().unwrap(), key_at(&s.items))
    } else {
        panic!(
            "{file}: the volume {} is neither a ConfigMap nor a Secret",
            volume.name
        )
    }
}

/// The text of the key that `file` reads, from the rendered ConfigMap or Secret behind it.
fn file_text(
    objects: &[Value],
    ns: &str,
    pod: &PodSpec,
    container: &Container,
    file: &str,
) -> String {
    let (k, object, key) = mounted(pod, container, file);
    let doc = objects
        .iter()
        .find(|d| kind(d).1 == k && namespace(d) == ns && name(d) == object)
        .unwrap_or_else(|| panic!("{file}: no {k} {ns}/{object} in the rendering"));
    if k == "ConfigMap" {
        let cm: ConfigMap = typed(doc);
        cm.data
            .unwrap_or_default()
            .remove(&key)
            .unwrap_or_else(|| panic!("{object} has no {key}"))
    } else {
        let s: Secret = typed(doc);
        let bytes = s
            .data
            .unwrap_or_default()
            .remove(&key)
            .unwrap_or_else(|| panic!("{object} has no {key}"));
        String::from_utf8(bytes.0).unwrap()
    }
}

fn secret_value(objects: &[Value], ns: &str, var: &EnvVar) -> String {
    let r = var
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .unwrap_or_else(|| panic!("{} is not read from a Secret", var.name));
    let s: Secret = typed(
        objects
            .iter()
            .find(|d| kind(d).1 == "Secret" && namespace(d) == ns && name(d) == r.name)
            .unwrap_or_else(|| panic!("{}: no Secret {ns}/{}", var.name, r.name)),
    );
    let bytes = s
        .data
        .unwrap_or_default()
        .remove(&r.key)
        .unwrap_or_else(|| panic!("{} has no {}", r.name, r.key));
    String::from_utf8(bytes.0).unwrap()
}

fn port_of(addr: &str) -> i32 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn the_example_overlay_renders_round_trips_and_its_parts_name_each_other() {
    let Some(objects) = render_example() else {
        return;
    };
    let mut failures = Vec::new();
    let mut ids = BTreeSet::new();
    for doc in &objects {
        for d in round_trip(doc) {
            failures.push(format!("{:?} {}: {d}", kind(doc), name(doc)));
        }
        assert!(
            ids.insert((kind(doc).1, namespace(doc), name(doc))),
            "{} twice",
            name(doc)
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    fleet_is_wired(&objects);
    redis_is_wired(&objects);
    cluster_autoscaler_is_wired(&objects);
    rbac_is_exactly_fleets(&objects);
    secrets_reach_pods_only_by_reference(&objects);
}

/// fleet's Deployment: its configuration, certificates, Redis URL, ports and probes are where
/// its settings say, in objects the rendering holds.
fn fleet_is_wired(objects: &[Value]) {
    let fleet: Deployment = typed(find(objects, "Deployment", "fleet", "fleet"));
    let pod = pod_spec(&fleet);
    let c = &pod.containers[0];
    assert_ne!(
        c.image.as_deref(),
        Some("fleet"),
        "the overlay names the image"
    );
    // The configuration is the ConfigMap's file, and fleet's own loader takes it.
    let path = value(c, "FLEET_CONFIG");
    let text = file_text(objects, "fleet", pod, c, path);
    let config = fleet::config::parse(&text, Path::new(path)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!config.slots.is_empty());
    for var in ["FLEET_TLS_CERT", "FLEET_TLS_KEY", "FLEET_TLS_CLIENT_CA"] {
        assert!(
            file_text(objects, "fleet", pod, c, value(c, var)).contains("-----BEGIN"),
            "{var}"
        );
    }
    // The Redis URL names the headless Service of the StatefulSet, on its port, and fleet reads it.
    let url = secret_value(objects, "fleet", env(c, "FLEET_REDIS_URL"));
    assert!(
        fleet_redis::connect::Endpoint::new(url.clone(), Duration::from_secs(1))
            .client()
            .is_ok()
    );
    let redis: Service = typed(find(objects, "Service", "fleet", "fleet-redis"));
    let host = url.split('@').nth(1).unwrap().trim_end_matches('/');
    let redis_port = redis.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port;
    assert_eq!(host, format!("fleet-redis.fleet.svc:{redis_port}"));
    assert_eq!(
        redis.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("None")
    );
    // Ports: the addresses fleet listens on are the named container ports the probes and the
    // Service use.
    let ports: BTreeMap<_, _> = c
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect();
    assert_eq!(ports["grpc"], port_of(value(c, "FLEET_GRPC_ADDR")));
    assert_eq!(ports["metrics"], port_of(value(c, "FLEET_METRICS_ADDR")));
    let ready = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(ready.path.as_deref(), Some("/readyz"));
    let live = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(live.path.as_deref(), Some("/healthz"));
    let pod_labels = fleet
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (service, port) in [("fleet", "grpc"), ("fleet-metrics", "metrics")] {
        let s: Service = typed(find(objects, "Service", "fleet", service));
        let spec = s.spec.unwrap();
        for (k, v) in spec.selector.unwrap() {
            assert_eq!(pod_labels.get(&k), Some(&v), "{service} selects the pods");
        }
        let target = spec.ports.unwrap()[0].target_port.clone().unwrap();
        assert_eq!(
            target,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(port.into())
        );
    }
    // The grace lets the longest operation finish, within the pod's own grace.
    let grace = humantime::parse_duration(value(c, "FLEET_SHUTDOWN_GRACE")).unwrap();
    let longest = config
        .groups
        .values()
        .flat_map(|g| [g.startup.timeout, g.shutdown.timeout])
        .max()
        .unwrap();
    assert!(
        grace >= longest,
        "FLEET_SHUTDOWN_GRACE {grace:?} < an operation's timeout {longest:?}"
    );
    let pod_grace = Duration::from_secs(pod.termination_grace_period_seconds.unwrap() as u64);
    assert!(
        pod_grace > grace,
        "terminationGracePeriodSeconds must exceed FLEET_SHUTDOWN_GRACE"
    );
    assert_eq!(value(c, "FLEET_KUBERNETES"), "true");
    let ns = env(c, "FLEET_KUBE_NAMESPACE")
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .as_ref()
        .unwrap();
    assert_eq!(ns.field_path, "metadata.namespace");
}

/// Redis: its configuration file keeps an append-only file, its data is the claim template's
/// volume, and the Service that governs it is headless.
fn redis_is_wired(objects: &[Value]) {
    let set: StatefulSet = typed(find(objects, "StatefulSet", "fleet", "fleet-redis"));
    let pod = pod_spec(&set);
    let c = &pod.containers[0];
    let command = c.command.clone().unwrap();
    let conf = file_text(objects, "fleet", pod, c, &command[1]);
    for line in [
        "appendonly yes",
        "appendfsync everysec",
        "dir /data",
        "maxmemory-policy noeviction",
    ] {
        assert!(conf.lines().any(|l| l == line), "redis.conf: {line}");
    }
    let spec = set.spec.as_ref().unwrap();
    let claim = &spec.volume_claim_templates.as_ref().unwrap()[0];
    let data = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/data")
        .unwrap();
    assert_eq!(claim.metadata.name.as_deref(), Some(data.name.as_str()));
    let governing: Service = typed(find(
        objects,
        "Service",
        "fleet",
        &spec.service_name.clone().unwrap(),
    ));
    assert_eq!(governing.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    // Its users are the secrets step's ACL file, with the default user off, and the probes'
    // password is fleet-viewer's.
    let acl_file = conf
        .lines()
        .find_map(|l| l.strip_prefix("aclfile "))
        .unwrap();
    let acl = file_text(objects, "fleet", pod, c, acl_file);
    for user in [
        "user fleet-controller ",
        "user fleet-viewer ",
        "user bench-01 ",
        "user default off",
    ] {
        assert!(
            acl.lines().any(|l| l.starts_with(user)),
            "users.acl: {user}"
        );
    }
    let viewer = secret_value(objects, "fleet", env(c, "REDISCLI_AUTH"));
    assert_eq!(
        viewer.len(),
        64,
        "the README's 32 random bytes, in hex, on one line"
    );
}

/// cluster-autoscaler: its cloud-config is the generated ConfigMap, and its certificate files are
/// in the generated Secret in its own namespace.
fn cluster_autoscaler_is_wired(objects: &[Value]) {
    let ca: Deployment = typed(find(
        objects,
        "Deployment",
        "kube-system",
        "cluster-autoscaler",
    ));
    let pod = pod_spec(&ca);
    let c = &pod.containers[0];
    let arg = c
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--cloud-config="))
        .unwrap();
    let config = cloud_config(&file_text(objects, "kube-system", pod, c, arg));
    assert_eq!(config.address, "fleet.fleet.svc:8086");
    for file in [&config.cert, &config.key, &config.cacert] {
        assert!(
            file_text(objects, "kube-system", pod, c, file).contains("-----BEGIN"),
            "{file}"
        );
    }
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("cluster-autoscaler")
    );
    find(
        objects,
        "ServiceAccount",
        "kube-system",
        "cluster-autoscaler",
    );
}

// ---------------------------------------------------------------------------------------------
// RBAC: fleet's is exactly its list.

/// One rule of fleet's: an API group, a resource, and the verbs on it.
type Rule = (&'static str, &'static str, &'static [&'static str]);

/// A role of fleet's and its rules; its binding has the same kind (plus `Binding`), namespace and
/// name.
struct FleetRole {
    kind: &'static str,
    namespace: &'static str,
    name: &'static str,
    rules: &'static [Rule],
}

/// fleet's RBAC, rule by rule (deploy/base/rbac.yaml says why each). Nothing else may name
/// fleet's ServiceAccounts.
const FLEET_RBAC: &[FleetRole] = &[
    FleetRole {
        kind: "ClusterRole",
        namespace: "",
        name: "fleet",
        rules: &[("", "nodes", &["list", "watch", "patch", "delete"])],
    },
    FleetRole {
        kind: "Role",
        namespace: "fleet",
        name: "fleet",
        rules: &[
            ("batch", "jobs", &["create", "get", "list"]),
            ("", "pods", &["list"]),
            ("events.k8s.io", "events", &["create", "patch"]),
        ],
    },
    FleetRole {
        kind: "Role",
        namespace: "default",
        name: "fleet-node-events",
        rules: &[("events.k8s.io", "events", &["create", "patch"])],
    },
];

type Grants = BTreeSet<(String, String, String)>;

fn grants(rules: &[k8s_openapi::api::rbac::v1::PolicyRule], role: &str) -> Grants {
    let mut out = BTreeSet::new();
    for rule in rules {
        assert!(
            rule.resource_names.is_none() && rule.non_resource_urls.is_none(),
            "{role}: a rule narrowed by name or URL is not in fleet's list"
        );
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    for word in [group, resource, verb] {
                        assert!(!word.contains('*'), "{role}: a wildcard ({word})");
                    }
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

/// Every RBAC object among `objects` but cluster-autoscaler's is fleet's, and fleet's are exactly
/// FLEET_RBAC, each Role bound to the ServiceAccount fleet alone by a binding of its own name.
fn rbac_is_exactly_fleets(objects: &[Value]) {
    let rbac: Vec<&Value> = objects
        .iter()
        .filter(|d| kind(d).0 == "rbac.authorization.k8s.io/v1" && name(d) != "cluster-autoscaler")
        .collect();
    let mut want = BTreeSet::new();
    for role in FLEET_RBAC {
        let (k, ns, n) = (role.kind, role.namespace, role.name);
        want.insert((k.to_owned(), ns.to_owned(), n.to_owned()));
        want.insert((format!("{k}Binding"), ns.to_owned(), n.to_owned()));
        let doc = rbac
            .iter()
            .find(|d| kind(d).1 == k && namespace(d) == ns && name(d) == n)
            .unwrap_or_else(|| panic!("no {k} {ns}/{n}"));
        let got = match k {
            "ClusterRole" => grants(&typed::<ClusterRole>(doc).rules.unwrap_or_default(), n),
            _ => grants(&typed::<Role>(doc).rules.unwrap_or_default(), n),
        };
        let expected: Grants = role
            .rules
            .iter()
            .flat_map(|(g, r, verbs)| {
                verbs
                    .iter()
                    .map(move |v| (g.to_string(), r.to_string(), v.to_string()))
            })
            .collect();
        assert_eq!(got, expected, "{k} {ns}/{n}");
    }
    let have: BTreeSet<_> = rbac
        .iter()
        .map(|d| {
            (
                kind(d).1.to_owned(),
                namespace(d).to_owned(),
                name(d).to_owned(),
            )
        })
        .collect();
    assert_eq!(have, want, "fleet's RBAC objects");
    for doc in &rbac {
        let (role_ref, subjects) = match kind(doc).1 {
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = typed(doc);
                (b.role_ref, b.subjects.unwrap_or_default())
            }
            "RoleBinding" => {
                let b: RoleBinding = typed(doc);
                (b.role_ref, b.subjects.unwrap_or_default())
            }
            _ => continue,
        };
        let role_kind = kind(doc).1.trim_end_matches("Binding");
        assert_eq!(
            (role_ref.kind.as_str(), role_ref.name.as_str()),
            (role_kind, name(doc))
        );
        let who: Vec<_> = subjects
            .iter()
            .map(|s| (s.kind.as_str(), s.namespace.as_deref(), s.name.as_str()))
            .collect();
        assert_eq!(
            who,
            [("ServiceAccount", Some("fleet"), "fleet")],
            "{}",
            name(doc)
        );
    }
}

#[test]
fn fleets_rbac_is_exactly_its_rule_list_and_the_job_account_has_none() {
    let objects = read_documents(&deploy().join("base/rbac.yaml"));
    rbac_is_exactly_fleets(&objects);
    // Nothing anywhere else under deploy/ grants fleet's accounts more, and the Job pods'
    // account is bound to nothing and mounts no token.
    for (file, doc) in source_objects() {
        if kind(&doc).0 == "rbac.authorization.k8s.io/v1" && file != "base/rbac.yaml" {
            assert_eq!(
                name(&doc),
                "cluster-autoscaler",
                "{file}: RBAC outside base/rbac.yaml"
            );
            assert!(
                !doc.to_string().contains("\"namespace\":\"fleet\""),
                "{file}"
            );
        }
    }
    let all = source_objects();
    let job: ServiceAccount = typed(source_object(&all, "ServiceAccount", "fleet", "fleet-job"));
    assert_eq!(job.automount_service_account_token, Some(false));
    for (file, doc) in &all {
        let subjects = match kind(doc).1 {
            "ClusterRoleBinding" => typed::<ClusterRoleBinding>(doc).subjects,
            "RoleBinding" => typed::<RoleBinding>(doc).subjects,
            _ => continue,
        };
        for s in subjects.unwrap_or_default() {
            assert_ne!(s.name, "fleet-job", "{file}: {} binds fleet-job", name(doc));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fleet configurations.

// SPEC §4.10: one example per driver, each loaded by fleet's own loader, every slot with the
// driver its file is about and no operation of its group.
#[test]
fn the_driver_examples_load_with_fleets_own_loader_one_driver_each() {
    use fleet::config::Run;
    use fleet::power::OffBy;
    for (file, driver, off) in [
        ("examples/wol-agent.yaml", "wol", OffBy::Agent),
        ("examples/redfish.yaml", "redfish", OffBy::Driver),
        ("examples/ipmi.yaml", "ipmi", OffBy::Driver),
    ] {
        let config = fleet::config::load(&deploy().join(file)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.slots.is_empty(), "{file}");
        for slot in config.slots.values() {
            let d = slot
                .driver
                .as_ref()
                .unwrap_or_else(|| panic!("{file}: {}", slot.name));
            assert_eq!(
                (d.type_name(), d.off),
                (driver, off),
                "{file}: {}",
                slot.name
            );
        }
        for group in config.groups.values() {
            assert_eq!(
                (&group.startup.run, &group.shutdown.run),
                (&Run::Driver, &Run::Driver),
                "{file}: {}",
                group.name
            );
        }
        assert!(config.doubts().is_empty(), "{file}: {:?}", config.doubts());
    }
}

#[test]
fn the_fleet_configurations_load_with_fleets_own_loader() {
    // The local stack's, and the overlay's (the ConfigMap's content).
    fleet::config::load(&deploy().join("examples/fleet.yaml")).unwrap_or_else(|e| panic!("{e}"));
    // `make cluster`'s (which fleet serve takes with --kubernetes).
    let cluster = fleet::config::load(&deploy().join("examples/cluster.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(cluster.slots.values().all(|s| s.kubernetes_node.is_some()));
    let config = fleet::config::load(&deploy().join("overlays/example/fleet.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!config.slots.is_empty());
    let benches = std::fs::read_to_string(deploy().join("systemd/README.md")).unwrap();
    for slot in config.slots.values() {
        // In Kubernetes every slot is a Node, matched by cluster-autoscaler on its provider ID.
        assert_eq!(slot.kubernetes_node.as_deref(), Some(slot.name.as_str()));
        assert_eq!(slot.provider_id, format!("fleet://{}", slot.name));
    }
    let first = config.slots.values().next().unwrap();
    assert!(
        benches.contains(&format!("--provider-id={}", first.provider_id)),
        "the bench side's kubelet flag is the slot's provider ID"
    );
    // A rolling update lets the longest operation finish (FLEET_SHUTDOWN_GRACE), within the
    // pod's own grace period.
    let all = source_objects();
    let fleet: Deployment = typed(source_object(&all, "Deployment", "fleet", "fleet"));
    let pod = pod_spec(&fleet);
    let grace =
        humantime::parse_duration(value(&pod.containers[0], "FLEET_SHUTDOWN_GRACE")).unwrap();
    let longest = config
        .groups
        .values()
        .flat_map(|g| [g.startup.timeout, g.shutdown.timeout])
        .max()
        .unwrap();
    assert!(
        grace >= longest,
        "FLEET_SHUTDOWN_GRACE {grace:?} is shorter than {longest:?}"
    );
    let pod_grace = Duration::from_secs(
        pod.termination_grace_period_seconds
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert!(
        pod_grace > grace,
        "terminationGracePeriodSeconds must exceed FLEET_SHUTDOWN_GRACE"
    );
    // fleet fails a stuck boot before cluster-autoscaler gives up on it.
    let ca: Deployment = typed(source_object(
        &all,
        "Deployment",
        "kube-system",
        "cluster-autoscaler",
    ));
    let provision = pod_spec(&ca).containers[0]
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix("--max-node-provision-time="))
        .map(|d| humantime::parse_duration(d).unwrap())
        .unwrap();
    for group in config.groups.values() {
        assert!(
            group.max_node_provision_time.unwrap() < provision,
            "{}",
            group.name
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets.

/// No value a container is given holds a credential: a URL with user information (`://…@`) or a
/// variable named for a password or a URL of Redis is read from a Secret, never written inline.
fn secrets_reach_pods_only_by_reference(objects: &[Value]) {
    let mut checked = 0;
    for doc in objects {
        let pod = match kind(doc).1 {
            "Deployment" => typed::<Deployment>(doc).spec.and_then(|s| s.template.spec),
            "StatefulSet" => typed::<StatefulSet>(doc).spec.and_then(|s| s.template.spec),
            _ => continue,
        };
        let pod = pod.unwrap();
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let words = c.command.iter().flatten().chain(c.args.iter().flatten());
            for word in words {
                assert!(
                    !(word.contains("://") && word.contains('@')),
                    "{}: {word}",
                    c.name
                );
            }
            assert!(
                c.env_from.is_none(),
                "{}: envFrom hides what a container gets",
                c.name
            );
            for var in c.env.iter().flatten() {
                checked += 1;
                if let Some(v) = &var.value {
                    assert!(
                        !(v.contains("://") && v.contains('@')),
                        "{}: {} holds a URL with a user or password inline",
                        c.name,
                        var.name
                    );
                }
                let sensitive = ["PASSWORD", "AUTH", "REDIS_URL", "TOKEN", "SECRET"]
                    .iter()
                    .any(|w| var.name.contains(w));
                if sensitive {
                    let from_secret = var
                        .value_from
                        .as_ref()
                        .is_some_and(|f| f.secret_key_ref.is_some());
                    assert!(
                        from_secret,
                        "{}: {} must come from a secretKeyRef",
                        c.name, var.name
                    );
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} variables were checked");
}

#[test]
fn no_secret_is_committed_and_the_redis_password_reaches_pods_only_through_secrets() {
    let objects: Vec<Value> = source_objects().into_iter().map(|(_, d)| d).collect();
    secrets_reach_pods_only_by_reference(&objects);
    for doc in &objects {
        assert_ne!(
            kind(doc).1,
            "Secret",
            "{}: a Secret is generated, never committed",
            name(doc)
        );
    }
    // The files Secrets are made from are ignored by git, all of them.
    let ignore =
        std::fs::read_to_string(deploy().join("overlays/example/secrets/.gitignore")).unwrap();
    let rules: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rules, ["*", "!.gitignore"]);
    // And no key is anywhere else.
    fn walk(dir: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("secrets") {
                    walk(&path);
                }
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains("PRIVATE KEY-----"),
                    "{}: a private key",
                    path.display()
                );
            }
        }
    }
    walk(&deploy());
    // fleet's Redis URL, and the probes' password, each from its Secret.
    let all = source_objects();
    let fleet: Deployment = typed(source_object(&all, "Deployment", "fleet", "fleet"));
    let redis: StatefulSet = typed(source_object(&all, "StatefulSet", "fleet", "fleet-redis"));
    let from = |c: &Container, var: &str| {
        let r = env(c, var)
            .value_from
            .clone()
            .unwrap()
            .secret_key_ref
            .unwrap();
        (r.name, r.key)
    };
    assert_eq!(
        from(&pod_spec(&fleet).containers[0], "FLEET_REDIS_URL"),
        ("fleet-redis".into(), "url".into())
    );
    assert_eq!(
        from(&pod_spec(&redis).containers[0], "REDISCLI_AUTH"),
        ("fleet-redis-acl".into(), "fleet-viewer".into())
    );
}

// ---------------------------------------------------------------------------------------------
// Pod security.

#[test]
fn every_pod_meets_the_restricted_pod_security_profile_with_a_read_only_root() {
    let mut pods = 0;
    for (file, doc) in source_objects() {
        let pod = match kind(&doc).1 {
            "Deployment" => typed::<Deployment>(&doc).spec.and_then(|s| s.template.spec),
            "StatefulSet" => typed::<StatefulSet>(&doc)
                .spec
                .and_then(|s| s.template.spec),
            _ => continue,
        };
        let pod = pod.unwrap();
        pods += 1;
        let at = format!("{file}: {}", name(&doc));
        let sc = pod.security_context.clone().unwrap_or_default();
        assert_eq!(sc.run_as_non_root, Some(true), "{at}: runAsNonRoot");
        assert_ne!(sc.run_as_user, Some(0), "{at}: root");
        let seccomp = sc.seccomp_profile.map(|p| p.type_);
        assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"), "{at}: seccomp");
        for host in [pod.host_network, pod.host_pid, pod.host_ipc] {
            assert_ne!(host, Some(true), "{at}: a host namespace");
        }
        for v in pod.volumes.iter().flatten() {
            let allowed = v.config_map.is_some()
                || v.secret.is_some()
                || v.empty_dir.is_some()
                || v.persistent_volume_claim.is_some()
                || v.projected.is_some()
                || v.downward_api.is_some();
            assert!(
                allowed,
                "{at}: volume {} is of a kind restricted refuses",
                v.name
            );
        }
        for c in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            let sc = c.security_context.clone().unwrap_or_default();
            assert_eq!(
                sc.allow_privilege_escalation,
                Some(false),
                "{at}/{}",
                c.name
            );
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{at}/{}", c.name);
            assert_ne!(sc.privileged, Some(true), "{at}/{}", c.name);
            let caps = sc.capabilities.unwrap_or_default();
            assert_eq!(
                caps.drop,
                Some(vec!["ALL".to_owned()]),
                "{at}/{}: drop ALL",
                c.name
            );
            assert!(caps.add.is_none(), "{at}/{}: adds capabilities", c.name);
            // No mount inside another: the kubelet cannot make a mount point inside a
            // ConfigMap's or a Secret's read-only volume.
            let paths: Vec<&str> = c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| m.mount_path.as_str())
                .collect();
            for (a, b) in paths.iter().flat_map(|a| paths.iter().map(move |b| (a, b))) {
                assert!(
                    a == b || !b.starts_with(&format!("{a}/")),
                    "{at}/{}: {b} inside {a}",
                    c.name
                );
            }
            // Requests to be scheduled fairly, and a memory limit so a leak is one pod's problem.
            let res = c.resources.clone().unwrap_or_default();
            let limits = res.limits.unwrap_or_default();
            assert!(
                res.requests.is_some() && limits.contains_key("memory"),
                "{at}/{}: requests and a memory limit",
                c.name
            );
        }
    }
    assert_eq!(
        pods, 4,
        "fleet, its Redis, cluster-autoscaler and the scale-up example"
    );
    // The image runs as the user the Deployment declares.
    let dockerfile = std::fs::read_to_string(deploy().join("image/Dockerfile")).unwrap();
    let all = source_objects();
    let fleet: Deployment = typed(source_object(&all, "Deployment", "fleet", "fleet"));
    let sc = pod_spec(&fleet).security_context.clone().unwrap();
    let user = format!(
        "USER {}:{}",
        sc.run_as_user.unwrap(),
        sc.run_as_group.unwrap()
    );
    assert!(dockerfile.lines().any(|l| l == user), "the image's {user}");
}

// ---------------------------------------------------------------------------------------------
// Redis, as the StatefulSet runs it.

/// A redis-server started as the StatefulSet starts it, killed on drop.
struct Redis {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The users of the secrets step (`fleet acl` over the overlay's configuration, the default user
/// turned off), with `password` for every user; and, for this test only, a user `inspector`
/// that may read the server's settings, which none of fleet's users can.
fn users(dir: &Path, password: &str) -> PathBuf {
    let passwords = dir.join("passwords");
    std::fs::create_dir(&passwords).unwrap();
    for user in ["fleet-controller", "fleet-viewer", "bench-01", "bench-02"] {
        std::fs::write(passwords.join(user), password).unwrap();
    }
    let config = deploy().join("overlays/example/fleet.yaml");
    let o = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .arg("acl")
        .arg("--config")
        .arg(config)
        .arg("--passwords")
        .arg(&passwords)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut acl = String::from_utf8(o.stdout).unwrap();
    acl.push_str("user default off\nuser inspector on >inspector -@all +config|get\n");
    let file = dir.join("users.acl");
    std::fs::write(&file, acl).unwrap();
    file
}

/// Runs the StatefulSet's own command line with base/redis.conf: the file's `dir` and `port` are
/// moved to a private directory and a free loopback port, and its ACL file is `users`.
fn redis_as_deployed(password: &str) -> Redis {
    let all = source_objects();
    let set: StatefulSet = typed(source_object(&all, "StatefulSet", "fleet", "fleet-redis"));
    let command = pod_spec(&set).containers[0].command.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let acl = users(dir.path(), password);
    let conf = std::fs::read_to_string(deploy().join("base/redis.conf")).unwrap();
    assert!(
        conf.contains("\ndir /data\n") && conf.contains("\naclfile /etc/redis/acl/users.acl\n")
    );
    let conf = conf
        .replace("dir /data", &format!("dir {}", dir.path().display()))
        .replace(
            "aclfile /etc/redis/acl/users.acl",
            &format!("aclfile {}", acl.display()),
        );
    let file = dir.path().join("redis.conf");
    std::fs::write(&file, conf).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args: Vec<String> = command[1..]
        .iter()
        .map(|a| match a.as_str() {
            "/etc/redis/conf/redis.conf" => file.display().to_string(),
            other => other.to_owned(),
        })
        .chain([
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
        ])
        .collect();
    let mut child = Command::new(&command[0])
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; install it (apt-get install redis-server)",
                command[0]
            )
        });
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut log = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            log.push_str(&line);
            log.push('\n');
            if line
                .to_ascii_lowercase()
                .contains("ready to accept connections")
            {
                let _ = tx.send(Ok(()));
                log.clear();
            }
        }
        let _ = tx.send(Err(log));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(())) => Redis { child, port, dir },
        other => panic!("redis-server did not start with base/redis.conf: {other:?}"),
    }
}

fn fleet_cli(url: &str, args: &[&str]) -> std::process::Output {
    let o = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(args)
        .env("FLEET_REDIS_URL", url)
        .env("FLEET_TIMEOUT", "5s")
        .output()
        .unwrap();
    crate::support::contract::check(args, &String::from_utf8_lossy(&o.stdout));
    o
}

#[test]
fn redis_runs_with_its_configuration_users_and_probes_as_deployed() {
    let password = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let redis = redis_as_deployed(password);
    let at = format!("127.0.0.1:{}", redis.port);
    let inspector = format!("redis://inspector:inspector@{at}/");
    let mut conn = redis::Client::open(inspector)
        .unwrap()
        .get_connection()
        .unwrap();
    for (setting, want) in [
        ("appendonly", "yes"),
        ("appendfsync", "everysec"),
        ("maxmemory-policy", "noeviction"),
        ("save", ""),
        // SPEC §7 S8: what Redis itself bounds of a bench whose credentials are an attacker's.
        ("proto-max-bulk-len", "16777216"),
        ("client-query-buffer-limit", "33554432"),
        ("maxclients", "10000"),
        ("databases", "1"),
        ("maxmemory-clients", "67108864"),
    ] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(setting)
            .query(&mut conn)
            .unwrap();
        assert_eq!(got[1], want, "{setting}");
    }
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("client-output-buffer-limit")
        .query(&mut conn)
        .unwrap();
    for class in ["normal 33554432 16777216 60", "pubsub 1048576 262144 10"] {
        assert!(got[1].contains(class), "{class} in {}", got[1]);
    }
    assert!(
        redis.dir.path().join("appendonlydir").is_dir(),
        "the append-only file is written"
    );
    // The readiness probe, as the pod runs it: fleet-viewer's password in REDISCLI_AUTH.
    let all = source_objects();
    let set: StatefulSet = typed(source_object(&all, "StatefulSet", "fleet", "fleet-redis"));
    let c = &pod_spec(&set).containers[0];
    let probe = c
        .readiness_probe
        .clone()
        .unwrap()
        .exec
        .unwrap()
        .command
        .unwrap();
    let script = probe[2].replace("redis-cli ", &format!("redis-cli -p {} ", redis.port));
    let run = |auth: &str| {
        Command::new(&probe[0])
            .args([&probe[1], &script])
            .env("REDISCLI_AUTH", auth)
            .status()
            .unwrap()
    };
    assert!(
        run(password).success(),
        "the probe passes with fleet-viewer's password"
    );
    assert!(!run("wrong").success(), "and fails without it");
    // fleet's URL as the secrets step writes it, with this server's address: fleet-controller.
    let controller = format!("redis://fleet-controller:{password}@{at}/");
    let o = fleet_cli(
        &controller,
        &["hold", "bench-02", "--register", "--reason", "test"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A bench's own user beats for it, and may not for another.
    let bench = format!("redis://bench-01:{password}@{at}/");
    let o = fleet_cli(&bench, &["beat", "bench-01"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        fleet_cli(&bench, &["beat", "bench-02"]).status.code(),
        Some(1)
    );
    let o = fleet_cli(&controller, &["state", "bench-01", "-o", "json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"UP\""));
    // Without a user, nothing: the default user is off.
    let o = fleet_cli(&format!("redis://{at}/"), &["state"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// The bench side.

#[test]
fn the_agents_environment_file_sets_only_variables_fleet_agent_reads() {
    let example = std::fs::read_to_string(deploy().join("systemd/agent.env.example")).unwrap();
    let help = Command::new(env!("CARGO_BIN_EXE_fleet"))
        .args(["agent", "--help"])
        .env_remove("FLEET_REDIS_URL")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let mut names = 0;
    for line in example.lines().map(|l| l.trim_start_matches("# ")) {
        let Some((var, _)) = line.split_once('=') else {
            continue;
        };
        if !var.starts_with("FLEET_") {
            continue;
        }
        names += 1;
        assert!(
            help.contains(&format!("[env: {var}")),
            "fleet agent reads no {var}"
        );
    }
    assert!(names >= 3, "{names} variables");
    let unit = std::fs::read_to_string(deploy().join("systemd/fleet-agent@.service")).unwrap();
    assert!(unit.contains("EnvironmentFile=-/etc/fleet/agent.env"));
}
