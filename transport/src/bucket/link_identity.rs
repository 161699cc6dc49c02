//! Claiming a bucket for a link: the link identity object written create-if-absent, and whose the bucket is.
//!
//! The object's key and document are the contract's (`segmirror_contract::link_identity`, re-exported here, where
//! the module doc says why a bucket carries one); this adds the write through a [`Store`].

pub use segmirror_contract::link_identity::*;

use crate::bucket::Store;
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::KeyPrefix;

/// What [`claim_link_identity`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityClaim {
    /// This call wrote the identity: the bucket's link is now this one.
    Created,
    /// The bucket already names this link id.
    Same,
    /// The bucket belongs to another link of the same name (its id here).
    Other(LinkIdentity),
}

/// Writes the identity of link `link` (id `id`) under `prefix` unless one is there (create-if-absent), and says
/// whose the bucket is.
pub async fn claim_link_identity(store: &Store, prefix: &KeyPrefix, link: &str, id: &str) -> Result<IdentityClaim> {
    let key = link_identity_key(prefix, link);
    let mine = LinkIdentity::new(link, id);
    let bytes = serde_json::to_vec_pretty(&mine).map_err(|e| Error::bad_key(&key, e.to_string()))?;
    if store.put_if_absent(&key, bytes).await? {
        return Ok(IdentityClaim::Created);
    }
    let found = store.get_bytes(&key, MAX_LINK_IDENTITY_BYTES).await?;
    let found = parse_link_identity(&key, link, &found)?;
    if found.id == id {
        Ok(IdentityClaim::Same)
    } else {
        Ok(IdentityClaim::Other(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::StoreUrl;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    #[tokio::test]
    async fn the_first_claim_writes_the_same_id_is_accepted_another_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            &StoreUrl::parse(dir.path().to_str().unwrap()).unwrap(),
            &Default::default(),
        )
        .unwrap();
        let prefix = KeyPrefix::new("p").unwrap();
        assert_eq!(
            claim_link_identity(&store, &prefix, "dr", A).await.unwrap(),
            IdentityClaim::Created
        );
        assert_eq!(
            claim_link_identity(&store, &prefix, "dr", A).await.unwrap(),
            IdentityClaim::Same
        );
        match claim_link_identity(&store, &prefix, "dr", B).await.unwrap() {
            IdentityClaim::Other(found) => assert_eq!(found.id, A),
            other => panic!("expected Other, got {other:?}"),
        }
        // Another link of the prefix has its own.
        assert_eq!(
            claim_link_identity(&store, &prefix, "dr2", B).await.unwrap(),
            IdentityClaim::Created
        );
        let key = link_identity_key(&prefix, "dr");
        assert_eq!(key, "p/dr/link@identity.json");
        assert_eq!(link_of_identity_key(&prefix, &key), Some("dr"));
        assert_eq!(
            link_of_identity_key(&prefix, "p/dr/orders/0/lease/00000000000000000001.json"),
            None
        );
        assert_eq!(
            link_of_identity_key(&KeyPrefix::root(), "dr/link@identity.json"),
            Some("dr")
        );
    }
}
