//! The scripted API server's protocol: a request's route (kind, namespace, name), its RBAC verb
//! and path pattern, and the answer the API server would give, by verb. Each answer changes the
//! world as the API server would (a new resourceVersion, a watch event) or refuses the call
//! with the Status the API server words it with.

use std::collections::BTreeMap;

use http::{Request, Response};
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{ApiServer, Key, Kind, Line, Served, Watcher, World, typed, watch_line};

impl ApiServer {
    /// One request: recorded as served, answered from the world, or refused with no answer at
    /// all (a connection the API server never took).
    pub(super) async fn serve(
        &self,
        request: Request<kube::client::Body>,
    ) -> Result<Response<axum::body::Body>, std::io::Error> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.expect("a request body");
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON request body")
        };
        let query = parts.uri.query().unwrap_or_default().to_owned();
        let params = params(&query);
        let route = route(parts.uri.path());
        let method = parts.method.as_str().to_owned();
        let verb = match (&route, method.as_str()) {
            (None, _) => "unknown",
            (Some((_, _, Some(_))), "GET") => "get",
            (Some(_), "GET") if params.get("watch").is_some_and(|w| w == "true") => "watch",
            (Some(_), "GET") => "list",
            (Some(_), "POST") => "create",
            (Some(_), "PATCH") => "patch",
            (Some(_), "DELETE") => "delete",
            (Some(_), _) => "unknown",
        };
        let mut served = Served {
            pattern: pattern(parts.uri.path(), route.as_ref()),
            path: parts.uri.path().to_owned(),
            method,
            query,
            verb,
            kind: route.as_ref().map(|r| r.0),
            namespace: route.as_ref().and_then(|r| r.1.clone()),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            body,
            status: 0,
            at: tokio::time::Instant::now(),
        };
        if served.kind == Some(Kind::Job) && verb == "create" {
            self.wait_for_creates().await;
        }
        let reply = self.with(|w| {
            let reply = answer(w, &served, &params);
            served.status = reply.as_ref().map_or(0, |(status, _)| *status);
            served.at = tokio::time::Instant::now();
            w.served.push(served);
            reply
        });
        match reply {
            None => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
            Some((status, Body::Json(value))) => Ok(response(status, &value)),
            Some((status, Body::Stream(lines))) => {
                let stream = futures::stream::unfold(lines, |mut lines| async move {
                    lines.recv().await.map(|line| (line, lines))
                });
                Ok(Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from_stream(stream))
                    .expect("a response"))
            }
        }
    }

    /// While creates are held, a Job create waits here: neither answered nor applied, as one
    /// the API server is still working on.
    async fn wait_for_creates(&self) {
        let mut changed = self.changed.subscribe();
        if !self.with(|w| {
            w.held += usize::from(w.holding_creates);
            w.holding_creates
        }) {
            return;
        }
        while self.read(|w| w.holding_creates) {
            changed.changed().await.expect("the server lives");
        }
        self.with(|w| w.held -= 1);
    }
}

/// An answer's body: one JSON document, or a watch's lines as they come.
enum Body {
    Json(Value),
    Stream(mpsc::UnboundedReceiver<Line>),
}

/// The kind, namespace and name a path addresses; `None` for a path fleet has no business with.
fn route(path: &str) -> Option<(Kind, Option<String>, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (kind, ns, rest) = match parts.as_slice() {
        ["api", "v1", "nodes", rest @ ..] => (Kind::Node, None, rest),
        ["api", "v1", "namespaces", ns, "pods", rest @ ..] => (Kind::Pod, Some(*ns), rest),
        ["apis", "batch", "v1", "namespaces", ns, "jobs", rest @ ..] => {
            (Kind::Job, Some(*ns), rest)
        }
        [
            "apis",
            "events.k8s.io",
            "v1",
            "namespaces",
            ns,
            "events",
            rest @ ..,
        ] => (Kind::Event, Some(*ns), rest),
        _ => return None,
    };
    let ns = ns.map(str::to_owned);
    match rest {
        [] => Some((kind, ns, None)),
        [name] => Some((kind, ns, Some((*name).to_owned()))),
        _ => None,
    }
}

/// The path as RBAC and the tests name it: `{namespace}` and `{name}` for the concrete ones.
fn pattern(path: &str, route: Option<&(Kind, Option<String>, Option<String>)>) -> String {
    let Some((_, ns, name)) = route else {
        return path.to_owned();
    };
    let mut parts: Vec<String> = path.split('/').map(str::to_owned).collect();
    if name.is_some() {
        *parts.last_mut().expect("a name segment") = "{name}".to_owned();
    }
    if let Some(ns) = ns
        && let Some(at) = parts.iter().position(|p| p == "namespaces")
        && parts.get(at + 1) == Some(ns)
    {
        parts[at + 1] = "{namespace}".to_owned();
    }
    parts.join("/")
}

fn params(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// Percent-decoding, enough for label selectors.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `object`'s labels hold every `key=value` of `selector`.
fn selected(object: &Value, selector: Option<&String>) -> bool {
    selector.is_none_or(|s| {
        s.split(',').filter(|t| !t.is_empty()).all(|term| {
            let (key, want) = term.split_once('=').unwrap_or((term, ""));
            object["metadata"]["labels"][key].as_str() == Some(want)
        })
    })
}

fn status(code: u16, reason: &str, message: String) -> (u16, Body) {
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    (code, Body::Json(status))
}

fn missing(kind: Kind, name: &str) -> (u16, Body) {
    status(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", kind.rbac().1),
    )
}

/// One call, as the API server would see it: what it addresses, in which namespace.
struct Call<'a> {
    served: &'a Served,
    kind: Kind,
    ns: String,
    params: &'a BTreeMap<String, String>,
}

impl Call<'_> {
    fn key(&self, name: &str) -> Key {
        (self.kind, self.ns.clone(), name.to_owned())
    }

    /// Whether an object lives where this call looks: its namespace, or anywhere for a call
    /// across namespaces (or about a cluster-scoped kind).
    fn sees(&self, object_ns: &str) -> bool {
        self.served.namespace.is_none() || object_ns == self.ns
    }
}

/// The answer to one call; `None` refuses it without one.
fn answer(
    w: &mut World,
    served: &Served,
    params: &BTreeMap<String, String>,
) -> Option<(u16, Body)> {
    let Some(kind) = served.kind else {
        let why = format!("the server could not find {}", served.path);
        return Some(status(404, "NotFound", why));
    };
    if kind == Kind::Node && w.nodes_cut {
        return None;
    }
    let call = Call {
        served,
        kind,
        ns: served.namespace.clone().unwrap_or_default(),
        params,
    };
    Some(match (served.verb, route(&served.path).and_then(|r| r.2)) {
        ("get", Some(name)) => match w.objects.get(&call.key(&name)) {
            Some(object) => (200, Body::Json(object.clone())),
            None => missing(kind, &name),
        },
        ("list", None) => list(w, &call),
        ("watch", None) => watch(w, &call),
        ("create", None) => create(w, &call),
        ("patch", Some(name)) => patch(w, &call, &name),
        ("delete", Some(name)) => delete(w, &call, &name),
        (verb, _) => {
            let why = format!("this script does not {verb} {}", served.path);
            status(405, "MethodNotAllowed", why)
        }
    })
}

fn list(w: &World, call: &Call) -> (u16, Body) {
    let items: Vec<Value> = w
        .objects
        .iter()
        .filter(|((k, ns, _), _)| *k == call.kind && call.sees(ns))
        .map(|(_, o)| o)
        .filter(|o| selected(o, call.params.get("labelSelector")))
        .cloned()
        .collect();
    let list = json!({
        "apiVersion": call.kind.api_version(), "kind": format!("{}List", call.kind.name()),
        "metadata": { "resourceVersion": w.version.to_string() }, "items": items,
    });
    (200, Body::Json(list))
}

/// A watch from `resourceVersion`: every change since, then every change as it comes.
fn watch(w: &mut World, call: &Call) -> (u16, Body) {
    let (tx, rx) = mpsc::unbounded_channel();
    let since: u64 = call
        .params
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for (version, kind, ns, kind_of_change, object) in &w.history {
        if *version > since && *kind == call.kind && call.sees(ns) {
            let _ = tx.send(Ok(watch_line(kind_of_change, object)));
        }
    }
    w.watchers.push(Watcher {
        kind: call.kind,
        namespace: call.served.namespace.clone(),
        lines: tx,
    });
    (200, Body::Stream(rx))
}

fn create(w: &mut World, call: &Call) -> (u16, Body) {
    let mut object = call.served.body.clone();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if w.objects.contains_key(&call.key(&name)) {
        let (group, plural) = call.kind.rbac();
        let why = format!("{plural}.{group} \"{name}\" already exists");
        return status(409, "AlreadyExists", why);
    }
    object["metadata"]["namespace"] = json!(call.ns);
    object["metadata"]["uid"] = json!(format!("uid-{}-{}", call.kind.rbac().1, w.version + 1));
    object["metadata"]["creationTimestamp"] =
        json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    (201, Body::Json(w.change(call.key(&name), "ADDED", object)))
}

/// A JSON merge patch, refused when it carries a resourceVersion that is not the object's.
fn patch(w: &mut World, call: &Call, name: &str) -> (u16, Body) {
    let content_type = &call.served.content_type;
    if content_type != "application/merge-patch+json" {
        let why = format!("this script takes merge patches only, not {content_type}");
        return status(415, "UnsupportedMediaType", why);
    }
    if call.kind == Kind::Node
        && let Some(edit) = w.racing.take()
        && let Some(object) = w.objects.get(&call.key(name)).cloned()
    {
        let mut node: Node = typed(object);
        edit(&mut node);
        let value = serde_json::to_value(&node).expect("a Node as JSON");
        w.change(call.key(name), "MODIFIED", value);
    }
    let Some(mut object) = w.objects.get(&call.key(name)).cloned() else {
        return missing(call.kind, name);
    };
    let patch = &call.served.body;
    let stale = patch["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|v| object["metadata"]["resourceVersion"] != json!(v));
    if stale {
        let why = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again",
            call.kind.rbac().1
        );
        return status(409, "Conflict", why);
    }
    merge(&mut object, patch);
    (
        200,
        Body::Json(w.change(call.key(name), "MODIFIED", object)),
    )
}

/// A delete, refused when its uid or resourceVersion precondition does not hold.
fn delete(w: &mut World, call: &Call, name: &str) -> (u16, Body) {
    let Some(object) = w.objects.get(&call.key(name)).cloned() else {
        return missing(call.kind, name);
    };
    let pre = &call.served.body["preconditions"];
    for field in ["uid", "resourceVersion"] {
        let (want, have) = (&pre[field], &object["metadata"][field]);
        if want.is_string() && have != want {
            let why = format!(
                "Precondition failed: {field} in precondition: {want}, {field} in object meta: \
                 {have}"
            );
            return status(409, "Conflict", why);
        }
    }
    (200, Body::Json(w.change(call.key(name), "DELETED", object)))
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().expect("an object");
    for (k, v) in fields {
        if v.is_null() {
            object.remove(k);
        } else {
            merge(object.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn response(status: u16, body: &Value) -> Response<axum::body::Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            serde_json::to_vec(body).expect("a JSON body"),
        ))
        .expect("a response")
}
