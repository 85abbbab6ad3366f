use super::*;

#[test]
fn subjects_are_escaped_for_paths_and_types_default_to_avro() {
    assert_eq!(escape("orders-value"), "orders-value");
    assert_eq!(escape("a/b c"), "a%2Fb%20c");
    assert_eq!(SchemaType::parse(None), Ok(SchemaType::Avro));
    assert_eq!(SchemaType::parse(Some("PROTOBUF")), Ok(SchemaType::Protobuf));
    assert!(SchemaType::parse(Some("XML")).is_err());
    assert_eq!(message_of(r#"{"error_code":40403,"message":"Schema 99 not found."}"#), "Schema 99 not found.");
}

/// A registry that is not there is retried for `retry_for`, then named.
#[test]
fn a_registry_that_cannot_be_reached_is_named_after_the_retries() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = crate::RegistryFile {
        url: Some(format!("http://127.0.0.1:{port}")),
        schemas: None,
        credentials_file: None,
        ca_file: None,
        cert_file: None,
        key_file: None,
        retry_for: Some("300ms".into()),
        timeout: None,
    }
    .validate(std::path::Path::new("/"))
    .unwrap();
    let r = Registry::new(config).unwrap();
    let e = r.by_id(1).unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(r.fetches() >= 2, "it was retried: {} requests", r.fetches());
}
