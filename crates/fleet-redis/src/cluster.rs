//! Redis Cluster (SPEC §2.7): a `redis+cluster://` URL's connection, through
//! redis-rs's `cluster-async`.
//!
//! Every fleet key carries a hash tag (`store::keys`): the presence keys, the lease and the
//! controller's own keys share `{<prefix>}`, each group's claims and slots share
//! `{<prefix>:<group>}`. So every script and every pipeline of one tag runs on one node, and a
//! read across groups is one call per group, sent together ([`query_by_tag`]).
//!
//! The driver re-sends nothing: `retries(0)`. Its retries would send a call again after a dropped
//! connection or a timeout, when the first may have run, and a script that records an operation
//! must not run twice. A refused call (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, READONLY) returns its
//! error to its caller, whose own schedule retries (the agent's next beat, the controller's next
//! pass, `fleet state`'s one retry), and a MOVED makes the driver read the slot map again first.
//!
//! [`query_by_tag`]: crate::conn::query_by_tag

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;

use redis::ProtocolVersion;
use redis::aio::AsyncPushSender;

use crate::connect::{ConnectError, Endpoint};
use crate::url::ClusterUrl;

impl ClusterUrl {
    /// The URL redis-rs reads for one node of the list: `redis[s]://[userinfo@]host:port`.
    pub fn node_url(&self, host: &str, port: u16) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        match &self.userinfo {
            Some(info) => format!("{scheme}://{info}@{host}:{port}"),
            None => format!("{scheme}://{host}:{port}"),
        }
    }
}

impl Endpoint {
    /// The client of a Cluster URL: its nodes, its user, TLS with the CA file where one is
    /// given, every connect and call bounded by the timeout, and no retry by the driver. With
    /// `push`, the connections speak RESP3 and deliver their pushes there (the wake listener's).
    pub fn cluster_client(
        &self,
        url: &ClusterUrl,
        push: Option<Arc<dyn AsyncPushSender>>,
    ) -> Result<ClusterClient, ConnectError> {
        crate::connect::install_crypto_provider();
        let invalid = |source| ConnectError::InvalidUrl {
            url: self.redacted(),
            source,
        };
        let nodes: Vec<String> = url.nodes.iter().map(|(h, p)| url.node_url(h, *p)).collect();
        // Connecting waits for each node, once for the nodes of the URL and once for those of
        // the slot map: half the timeout each keeps a hung node (a stopped replica) from using
        // up the whole bound of connecting, which is twice the timeout.
        let mut builder = ClusterClientBuilder::new(nodes)
            .retries(0)
            .connection_timeout(self.timeout / 2)
            .response_timeout(self.timeout);
        if let Some(path) = &self.ca_file {
            let pem = crate::file::read(path, crate::file::PEM).map_err(|source| {
                ConnectError::CaFile {
                    path: path.clone(),
                    source,
                }
            })?;
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            });
        }
        if let Some(push) = push {
            builder = builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(push);
        }
        builder.build().map_err(invalid)
    }

    /// A connection to the cluster a Cluster URL names, checked with a `PING` of one primary,
    /// bounded by the timeout. One primary, not every node: a plain `PING` goes to all of them,
    /// and one stuck replica would then refuse every verb (found by `tests/process/cluster.rs`, a replica
    /// stopped with SIGSTOP).
    pub async fn cluster(
        &self,
        url: &ClusterUrl,
        push: Option<Arc<dyn AsyncPushSender>>,
    ) -> Result<ClusterConnection, ConnectError> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let client = self.cluster_client(url, push)?;
        let connecting = async {
            let mut conn = client.get_async_connection().await?;
            conn.route_command(
                redis::cmd("PING"),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            )
            .await?;
            Ok::<_, redis::RedisError>(conn)
        };
        match tokio::time::timeout(self.timeout * 2, connecting).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(source)) => Err(self.unreachable(source)),
            Err(_) => Err(
                self.unreachable(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> ClusterUrl {
        match crate::url::parse(text) {
            Ok(crate::url::Target::Cluster(c)) => c,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_node_url_carries_the_scheme_and_the_user() {
        let u = url("rediss+cluster://fleet:p%40ss@a:7000,[::1]:7001");
        assert_eq!(u.node_url("a", 7000), "rediss://fleet:p%40ss@a:7000");
        assert_eq!(u.node_url("::1", 7001), "rediss://fleet:p%40ss@[::1]:7001");
        let plain = url("redis+cluster://h");
        assert_eq!(plain.node_url("h", 6379), "redis://h:6379");
    }

    #[test]
    fn a_cluster_client_is_built_without_connecting() {
        let endpoint = Endpoint::new(
            "redis+cluster://u:pw@127.0.0.1:1,127.0.0.1:2",
            std::time::Duration::from_secs(1),
        );
        let Ok(crate::url::Target::Cluster(u)) = endpoint.target() else {
            panic!("a cluster URL");
        };
        assert!(endpoint.cluster_client(&u, None).is_ok());
    }
}
