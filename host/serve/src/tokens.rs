//! Bearer tokens: who a request is. A token is `weir_ID_SECRET`; the registry keeps the id and
//! the BLAKE3 hash of the whole token, never the token, so a copy of the data directory grants
//! nothing. The admin token is read from a file at start-up (never from the command line, where
//! `ps` would show it) and kept only as its hash too. Comparisons are of hashes, in constant time
//! (`blake3::Hash`'s `==`).

use super::registry::Registry;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Admin,
    Tenant(String),
}

/// Random bytes in a token's secret: 256 bits.
const SECRET_BYTES: usize = 32;
/// Random bytes in a token's id: enough that ids never collide in practice.
const ID_BYTES: usize = 9;
/// The shortest admin token accepted from its file.
pub const MIN_ADMIN_TOKEN: usize = 24;

pub fn hash(token: &str) -> blake3::Hash {
    blake3::hash(token.as_bytes())
}

/// A new token and its id.
pub fn mint() -> Result<(String, String), getrandom::Error> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    getrandom::fill(&mut id)?;
    getrandom::fill(&mut secret)?;
    // The id's alphabet has no `_`, so the token splits at its first two.
    let id = b64.encode(id).replace(['-', '_'], "x");
    Ok((format!("weir_{id}_{}", b64.encode(secret)), id))
}

/// Who `token` is, or `None` for an unknown, revoked or malformed one.
pub fn identify(registry: &Registry, admin: &blake3::Hash, token: &str) -> Option<Caller> {
    let h = hash(token);
    if h == *admin {
        return Some(Caller::Admin);
    }
    let id = token.strip_prefix("weir_")?.split_once('_')?.0;
    let record = registry.tokens.get(id)?;
    let stored = blake3::Hash::from_hex(&record.hash).ok()?;
    (stored == h).then(|| Caller::Tenant(record.tenant.clone()))
}

/// The admin token from its file: the first line, trimmed.
pub fn read_admin(path: &std::path::Path) -> Result<blake3::Hash, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.len() < MIN_ADMIN_TOKEN {
        return Err(format!(
            "{}: the admin token must be at least {MIN_ADMIN_TOKEN} characters (e.g. `openssl rand -hex 32`)",
            path.display()
        ));
    }
    Ok(hash(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TokenRecord;

    #[test]
    fn a_minted_token_identifies_its_tenant_until_revoked_and_nothing_else_does() {
        let mut r = Registry::default();
        let admin = hash("the-admin-token-of-this-test");
        let (token, id) = mint().unwrap();
        assert!(token.starts_with(&format!("weir_{id}_")));
        r.tokens.insert(
            id.clone(),
            TokenRecord { tenant: "acme".into(), hash: hash(&token).to_hex().to_string(), created_ms: 0 },
        );
        assert_eq!(identify(&r, &admin, &token), Some(Caller::Tenant("acme".into())));
        assert_eq!(identify(&r, &admin, "the-admin-token-of-this-test"), Some(Caller::Admin));
        // Same id, another secret; a truncated token; garbage.
        assert_eq!(identify(&r, &admin, &format!("weir_{id}_AAAA")), None);
        assert_eq!(identify(&r, &admin, &token[..token.len() - 1]), None);
        assert_eq!(identify(&r, &admin, "weir_"), None);
        r.tokens.remove(&id);
        assert_eq!(identify(&r, &admin, &token), None);
        assert!(!serde_json::to_string(&r).unwrap().contains(&token));
    }
}
