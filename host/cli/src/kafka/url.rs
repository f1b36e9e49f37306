//! Kafka topics by URL (`kafka://BROKERS/TOPIC?group=G&…`), and the headers a
//! worker writes.

use rdkafka::config::ClientConfig;

use omlet::{Error, Result};

/// The header that names an output's input: `topic/partition/offset`.
pub const SOURCE_HEADER: &str = "omlet-source";

/// The header that names the worker (process id and start time) that wrote an output.
pub const WORKER_HEADER: &str = "omlet-worker";

/// A topic on a Kafka cluster: `kafka://HOST:PORT[,HOST:PORT…]/TOPIC[?group=G&key=value…]`.
///
/// `group` is the consumer group (an input needs one). Every other query
/// parameter is a librdkafka client property, passed as it is
/// (`security.protocol=ssl`, `session.timeout.ms=10000`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaUrl {
    /// The bootstrap brokers, comma-separated.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The consumer group (`?group=`).
    pub group: Option<String>,
    /// Further librdkafka properties.
    pub properties: Vec<(String, String)>,
}

impl KafkaUrl {
    /// Whether `text` is meant as a Kafka URL.
    pub fn is_kafka(text: &str) -> bool {
        text.starts_with("kafka://")
    }

    /// Parses `kafka://BROKERS/TOPIC?group=G&…`; fails with
    /// [`Error::Config`] saying what is missing.
    pub fn parse(text: &str) -> Result<KafkaUrl> {
        let bad = |why: &str| {
            Error::Config(format!(
                "`{}`: {why} (expected kafka://HOST:PORT/TOPIC?group=G)",
                omlet::knowledge::config::redact(text)
            ))
        };
        let rest = text.strip_prefix("kafka://").ok_or_else(|| bad("not a kafka:// URL"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = path.split_once('/').ok_or_else(|| bad("no topic"))?;
        if brokers.is_empty() {
            return Err(bad("no broker"));
        }
        if topic.is_empty() || topic.contains('/') {
            return Err(bad("the topic must be one path segment"));
        }
        let mut url = KafkaUrl { brokers: brokers.to_string(), topic: topic.to_string(), group: None, properties: Vec::new() };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| bad(&format!("`{}` has no value", pair)))?;
            match k {
                "group" | "group.id" => url.group = Some(v.to_string()),
                "bootstrap.servers" => return Err(bad("give the brokers before the topic, not as bootstrap.servers")),
                _ => url.properties.push((k.to_string(), v.to_string())),
            }
        }
        Ok(url)
    }

    pub(super) fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}

impl std::fmt::Display for KafkaUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}/{}", self.brokers, self.topic)?;
        if let Some(g) = &self.group {
            write!(f, "?group={g}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_hide_secrets() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092,127.0.0.1:9093/logs?group=g&session.timeout.ms=6000").unwrap();
        assert_eq!(u.brokers, "127.0.0.1:9092,127.0.0.1:9093");
        assert_eq!((u.topic.as_str(), u.group.as_deref()), ("logs", Some("g")));
        assert_eq!(u.properties, [("session.timeout.ms".to_string(), "6000".to_string())]);
        let e = KafkaUrl::parse("kafka://h:1/?sasl.password=hunter2").unwrap_err().to_string();
        assert!(e.contains("sasl.password=***") && !e.contains("hunter2"), "{e}");
        assert!(KafkaUrl::parse("kafka:///t").is_err());
        assert!(KafkaUrl::parse("kafka://h:1/t?group").is_err());
    }
}
