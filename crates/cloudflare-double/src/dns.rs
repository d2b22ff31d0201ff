//! Zones and DNS records: the token permissions on them, and the endpoints `GET /zones`,
//! `GET|POST /zones/{id}/dns_records` and `PATCH|DELETE /zones/{id}/dns_records/{id}` (the
//! records themselves live in [`crate::state`]).
//!
//! Sources (see `docs/cloudflare-double.md` for the table): the record and zone schemas and the
//! list parameters of <https://developers.cloudflare.com/api/resources/dns/subresources/records/>
//! and <https://developers.cloudflare.com/api/resources/zones/methods/list/>; the conflict rules
//! of <https://developers.cloudflare.com/dns/manage-dns-records/troubleshooting/records-with-same-name/>
//! (a CNAME cannot share its name with any other record); error codes as quoted in public
//! issue threads where noted, "UNCONFIRMED" otherwise.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::envelope::{Reply, error, failure, no_route, paged, query_pairs, success};
use crate::state::{
    ControlError, DnsGrant, RecordRec, TokenScope, World, ZoneRec, is_account_id, now_rfc3339,
    random_hex32,
};

/// Record types the double accepts (a subset of the documented list).
const TYPES: &[&str] = &[
    "A", "AAAA", "CAA", "CNAME", "HTTPS", "MX", "NS", "SRV", "SVCB", "TXT",
];
/// Types that may be proxied (docs: "proxied" applies to A, AAAA and CNAME).
const PROXIABLE: &[&str] = &["A", "AAAA", "CNAME"];

/// Default and bounds of `per_page` for zones (docs: 5..50, default 20).
const ZONES_PER_PAGE: (u64, u64, u64) = (20, 5, 50);
/// Default and bounds of `per_page` for DNS records (docs: default 100, 5..5,000,000).
const RECORDS_PER_PAGE: (u64, u64, u64) = (100, 5, 5_000_000);

fn bad(code: i64, message: &str) -> Reply {
    failure(400, vec![error(code, message)])
}

/// HTTP 403, code 10000 "Authentication error": the token has no DNS permission on the zone
/// (the answer quoted in public threads for a token without the needed zone permission).
fn not_allowed() -> Reply {
    failure(403, vec![error(10000, "Authentication error")])
}

/// The zone lookup a request needs: the zone's record in the world, if the token may use it.
fn zone_for<'w>(
    world: &'w mut World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    zone_id: &str,
    edit: bool,
    full_path: &str,
) -> Result<&'w mut ZoneRec, Reply> {
    let Some(zone) = world.zones.get_mut(&zone_id.to_ascii_lowercase()) else {
        // Observed: an unknown zone ID answers like an unknown route (7003/7000).
        return Err(no_route(full_path));
    };
    let allowed = scope.reaches(&zone.account)
        && grant.is_some_and(|g| g.covers(&zone.name) && (g.edit || !edit));
    if !allowed {
        return Err(not_allowed());
    }
    Ok(zone)
}

fn zone_json(z: &ZoneRec, account_name: &str) -> Value {
    json!({
        "id": z.id, "name": z.name, "status": "active", "paused": false, "type": "full",
        "account": {"id": z.account, "name": account_name},
        "name_servers": ["ada.ns.cloudflare.com", "bob.ns.cloudflare.com"],
        "created_on": z.created_on, "modified_on": z.created_on,
    })
}

fn record_json(z: &ZoneRec, r: &RecordRec) -> Value {
    json!({
        "id": r.id, "zone_id": z.id, "zone_name": z.name, "name": r.name, "type": r.kind,
        "content": r.content, "proxiable": PROXIABLE.contains(&r.kind.as_str()),
        "proxied": r.proxied, "ttl": r.ttl, "comment": r.comment, "tags": [],
        "settings": {}, "meta": {}, "created_on": z.created_on, "modified_on": z.created_on,
    })
}

/// `GET /zones`: the zones of the token's accounts its DNS grant covers (a token without any
/// zone permission sees none), filtered by `name` and `account.id`, paged.
pub(crate) fn list_zones(
    world: &World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    query: Option<&str>,
) -> Reply {
    let pairs = query_pairs(query);
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let all: Vec<Value> = world
        .zones
        .values()
        .filter(|z| scope.reaches(&z.account) && grant.is_some_and(|g| g.covers(&z.name)))
        .filter(|z| get("name").is_none_or(|n| n.eq_ignore_ascii_case(&z.name)))
        .filter(|z| get("account.id").is_none_or(|a| a.eq_ignore_ascii_case(&z.account)))
        .map(|z| {
            let name = world
                .accounts
                .get(&z.account)
                .map_or("", |a| a.name.as_str());
            zone_json(z, name)
        })
        .collect();
    paged(all, &pairs, ZONES_PER_PAGE)
}

/// `GET /zones/{id}/dns_records`: exact `name` and `type` filters, paged, ordered by type,
/// name and ID.
pub(crate) fn list_records(
    world: &mut World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    zone_id: &str,
    query: Option<&str>,
    full_path: &str,
) -> Reply {
    let zone = match zone_for(world, scope, grant, zone_id, false, full_path) {
        Ok(z) => z,
        Err(reply) => return reply,
    };
    let pairs = query_pairs(query);
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut records: Vec<&RecordRec> = zone
        .records
        .values()
        .filter(|r| get("name").is_none_or(|n| n.eq_ignore_ascii_case(&r.name)))
        .filter(|r| get("type").is_none_or(|t| t.eq_ignore_ascii_case(&r.kind)))
        .collect();
    records.sort_by(|a, b| (&a.kind, &a.name, &a.id).cmp(&(&b.kind, &b.name, &b.id)));
    let all = records.iter().map(|r| record_json(zone, r)).collect();
    paged(all, &pairs, RECORDS_PER_PAGE)
}

/// The fields of a create or PATCH body.
#[derive(Deserialize, Default)]
struct RecordBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    content: Option<String>,
    proxied: Option<bool>,
    ttl: Option<u32>,
    comment: Option<String>,
}

/// `POST /zones/{id}/dns_records`.
pub(crate) fn create_record(
    world: &mut World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    zone_id: &str,
    body: &[u8],
    full_path: &str,
) -> Reply {
    let zone = match zone_for(world, scope, grant, zone_id, true, full_path) {
        Ok(z) => z,
        Err(reply) => return reply,
    };
    let body: RecordBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        // UNCONFIRMED code for a body that is not a JSON object of the schema.
        Err(e) => return bad(9207, &format!("Request body is invalid: {e}")),
    };
    let record = RecordRec {
        id: random_hex32(),
        name: body.name.unwrap_or_default(),
        kind: body.kind.unwrap_or_default(),
        content: body.content.unwrap_or_default(),
        proxied: body.proxied.unwrap_or(false),
        ttl: body.ttl.unwrap_or(1),
        comment: body.comment,
    };
    match admit(zone, record, None) {
        Ok(id) => success(record_json(zone, &zone.records[&id])),
        Err(reply) => reply,
    }
}

/// `PATCH /zones/{id}/dns_records/{id}`: the fields given replace the record's.
pub(crate) fn patch_record(
    world: &mut World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    zone_id: &str,
    record_id: &str,
    body: &[u8],
    full_path: &str,
) -> Reply {
    let zone = match zone_for(world, scope, grant, zone_id, true, full_path) {
        Ok(z) => z,
        Err(reply) => return reply,
    };
    let Some(current) = zone.records.get(&record_id.to_ascii_lowercase()).cloned() else {
        return record_not_found();
    };
    let body: RecordBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return bad(9207, &format!("Request body is invalid: {e}")),
    };
    let record = RecordRec {
        id: current.id.clone(),
        name: body.name.unwrap_or(current.name),
        kind: body.kind.unwrap_or(current.kind),
        content: body.content.unwrap_or(current.content),
        proxied: body.proxied.unwrap_or(current.proxied),
        ttl: body.ttl.unwrap_or(current.ttl),
        comment: body.comment.or(current.comment),
    };
    match admit(zone, record, Some(&current.id)) {
        Ok(id) => success(record_json(zone, &zone.records[&id])),
        Err(reply) => reply,
    }
}

/// `DELETE /zones/{id}/dns_records/{id}`: result `{id}`.
pub(crate) fn delete_record(
    world: &mut World,
    scope: &TokenScope,
    grant: Option<&DnsGrant>,
    zone_id: &str,
    record_id: &str,
    full_path: &str,
) -> Reply {
    let zone = match zone_for(world, scope, grant, zone_id, true, full_path) {
        Ok(z) => z,
        Err(reply) => return reply,
    };
    match zone.records.remove(&record_id.to_ascii_lowercase()) {
        Some(r) => success(json!({"id": r.id})),
        None => record_not_found(),
    }
}

/// HTTP 404, code 81044 "Record does not exist." (code as quoted in public client issues).
fn record_not_found() -> Reply {
    failure(404, vec![error(81044, "Record does not exist.")])
}

/// The name as the API stores it: lower-case, no trailing dot, `@` the apex, and a name outside
/// the zone taken as relative to it (the dashboard and API append the zone name).
fn qualify(name: &str, zone: &str) -> String {
    let n = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if n == "@" || n == zone {
        return zone.to_owned();
    }
    if n.ends_with(&format!(".{zone}")) {
        n
    } else {
        format!("{n}.{zone}")
    }
}

fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').enumerate().all(|(i, label)| {
            (i == 0 && label == "*")
                || (!label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        })
}

/// Validates `record` against the zone (the record `replacing` excluded) and stores it.
fn admit(
    zone: &mut ZoneRec,
    mut record: RecordRec,
    replacing: Option<&str>,
) -> Result<String, Reply> {
    record.kind = record.kind.to_ascii_uppercase();
    if !TYPES.contains(&record.kind.as_str()) {
        // UNCONFIRMED code.
        return Err(bad(9020, "Invalid DNS record type"));
    }
    if record.name.trim().is_empty() {
        return Err(bad(9005, "DNS record name is required"));
    }
    record.name = qualify(&record.name, &zone.name);
    if !valid_name(&record.name) {
        return Err(bad(9005, "DNS name is invalid."));
    }
    if record.content.trim().is_empty() {
        return Err(bad(9006, "Content is required"));
    }
    if record.kind == "CNAME" {
        record.content = record
            .content
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if !valid_name(&record.content) || record.content.starts_with("*.") {
            // Code as quoted in public threads ("Content for CNAME record is invalid.").
            return Err(bad(9007, "Content for CNAME record is invalid."));
        }
    }
    if record.proxied && !PROXIABLE.contains(&record.kind.as_str()) {
        return Err(bad(9004, "This record type cannot be proxied."));
    }
    if !(record.ttl == 1 || (30..=86_400).contains(&record.ttl)) {
        return Err(bad(
            9021,
            "Invalid TTL. Must be between 30 and 86400 seconds, or 1 for Automatic.",
        ));
    }
    if record.proxied {
        record.ttl = 1;
    }
    let others: Vec<&RecordRec> = zone
        .records
        .values()
        .filter(|r| Some(r.id.as_str()) != replacing && r.name == record.name)
        .collect();
    let address = |k: &str| matches!(k, "A" | "AAAA" | "CNAME");
    if others
        .iter()
        .any(|r| r.kind == record.kind && r.content == record.content)
    {
        // Observed: aaPanel/aaPanel#112 (HTTP 400, 81057 "Record already exists.").
        return Err(bad(81057, "Record already exists."));
    }
    if address(&record.kind)
        && others
            .iter()
            .any(|r| r.kind == "CNAME" || (record.kind == "CNAME" && address(&r.kind)))
    {
        return Err(bad(
            81053,
            "An A, AAAA, or CNAME record with that host already exists.",
        ));
    }
    if (record.kind == "CNAME" && !others.is_empty())
        || (record.kind != "CNAME" && others.iter().any(|r| r.kind == "CNAME"))
    {
        // UNCONFIRMED: the code of a CNAME next to records of other types.
        return Err(bad(81054, "A CNAME record with that host already exists."));
    }
    let id = record.id.clone();
    zone.records.insert(id.clone(), record);
    Ok(id)
}

impl World {
    pub(crate) fn add_zone(
        &mut self,
        account: &str,
        id: Option<&str>,
        name: &str,
    ) -> Result<String, ControlError> {
        let account = account.to_ascii_lowercase();
        if !self.accounts.contains_key(&account) {
            return Err(ControlError::NoAccount(account));
        }
        let id = match id {
            Some(id) if !is_account_id(id) => return Err(ControlError::ZoneId(id.into())),
            Some(id) => id.to_ascii_lowercase(),
            None => random_hex32(),
        };
        let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
        if !valid_name(&name) || name.starts_with('*') || !name.contains('.') {
            return Err(ControlError::ZoneName(name));
        }
        if self.zones.contains_key(&id) || self.zones.values().any(|z| z.name == name) {
            return Err(ControlError::Exists(name));
        }
        self.zones.insert(
            id.clone(),
            ZoneRec {
                id: id.clone(),
                name,
                account,
                created_on: now_rfc3339(),
                records: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    /// Adds a record as if made in the dashboard: the API's validation and conflict rules apply.
    pub(crate) fn add_record(
        &mut self,
        zone_name: &str,
        kind: &str,
        name: &str,
        content: &str,
        proxied: bool,
    ) -> Result<RecordRec, ControlError> {
        let zone = self
            .zones
            .values_mut()
            .find(|z| z.name.eq_ignore_ascii_case(zone_name))
            .ok_or_else(|| ControlError::NoZone(zone_name.into()))?;
        let record = RecordRec {
            id: random_hex32(),
            name: name.into(),
            kind: kind.into(),
            content: content.into(),
            proxied,
            ttl: 1,
            comment: None,
        };
        match admit(zone, record, None) {
            Ok(id) => Ok(zone.records[&id].clone()),
            Err(reply) => Err(ControlError::Record(format!("{:?}", reply.body))),
        }
    }

    /// Every record, by zone name.
    pub(crate) fn records(&self) -> BTreeMap<String, Vec<RecordRec>> {
        self.zones
            .values()
            .map(|z| (z.name.clone(), z.records.values().cloned().collect()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_qualified_like_the_api() {
        assert_eq!(qualify("www", "example.com"), "www.example.com");
        assert_eq!(qualify("@", "example.com"), "example.com");
        assert_eq!(
            qualify("WWW.Example.com.", "example.com"),
            "www.example.com"
        );
        assert_eq!(
            qualify("a.other.org", "example.com"),
            "a.other.org.example.com"
        );
        assert!(valid_name("*.example.com"));
        assert!(valid_name("_tunnel-gateway.a.example.com"));
        assert!(!valid_name("a.*.example.com"));
        assert!(!valid_name("a..example.com"));
    }
}
