//! Embedding omlet in a tokio program, with lookups against PostgreSQL.
//!
//!     OMLET_PG_URL=postgres://user:pass@127.0.0.1:5432/db cargo run -p omlet --example embed_postgres
//!
//! The database needs a table `ip_zone(lo_int bigint, hi_int bigint, zone text, owner text)`.

use omlet::{Engine, KnowledgeConfig, LoadOptions, Record};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("OMLET_PG_URL")?;
    let mut config = KnowledgeConfig::for_url(&url);
    config.cache.ttl_ms = Some(60_000); // answers live one minute in the caches
    let knowledge = config.open().await?;

    let engine = Engine::new()?;
    let rule = engine.load_path("examples/nginx/nginx.oml", &LoadOptions::new().knowledge(knowledge.clone())).await?;

    let record = Record::from_json(r#"{"remote_addr":"10.0.0.7","status":"200","method":"GET"}"#)?;
    let enriched = rule.evaluate(&record).await?;
    println!("{enriched}");
    println!("{}", knowledge.stats().to_json());
    Ok(())
}
