//! A container's environment as the kubelet builds it: `envFrom` (Secrets, ConfigMaps, with a
//! prefix), then `env` (values with `$(VAR)` references, the downward API, keys of Secrets and
//! ConfigMaps), and the same `$(VAR)` expansion for `command` and `args`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret};
use kube::Api;

/// The environment variables `container` declares, in order (a later one wins). A missing
/// Secret, ConfigMap or key that is not `optional` is the error the kubelet reports as
/// `CreateContainerConfigError`.
pub(super) async fn build(
    client: &kube::Client,
    namespace: &str,
    container: &Container,
    field: impl Fn(&str) -> Result<String, String>,
) -> Result<Vec<(String, String)>, String> {
    let sources = Sources { client, namespace };
    let mut vars: Vec<(String, String)> = Vec::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(s) = &from.secret_ref {
            sources.secret(&s.name, s.optional.unwrap_or(false)).await?
        } else if let Some(c) = &from.config_map_ref {
            sources
                .config_map(&c.name, c.optional.unwrap_or(false))
                .await?
        } else {
            BTreeMap::new()
        };
        vars.extend(data.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let defined: BTreeMap<&str, &str> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                Some(expand(var.value.as_deref().unwrap_or(""), &defined))
            }
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    Some(field(&f.field_path)?)
                } else if let Some(key) = &from.secret_key_ref {
                    let data = sources
                        .secret(&key.name, key.optional.unwrap_or(false))
                        .await?;
                    pick(
                        &data,
                        &key.key,
                        "Secret",
                        namespace,
                        &key.name,
                        key.optional,
                    )?
                } else if let Some(key) = &from.config_map_key_ref {
                    let data = sources
                        .config_map(&key.name, key.optional.unwrap_or(false))
                        .await?;
                    pick(
                        &data,
                        &key.key,
                        "ConfigMap",
                        namespace,
                        &key.name,
                        key.optional,
                    )?
                } else {
                    return Err(format!(
                        "env {}: resourceFieldRef and fileKeyRef are not supported by this node yet",
                        var.name
                    ));
                }
            }
        };
        if let Some(value) = value {
            vars.retain(|(k, _)| k != &var.name);
            vars.push((var.name.clone(), value));
        }
    }
    Ok(vars)
}

/// Expands `$(VAR)` with `vars` as the kubelet does: `$$` is a literal `$`, an undefined
/// reference stays as written.
pub(super) fn expand(input: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(close) = rest.strip_prefix("$(").and_then(|r| r.find(')')) {
            let name = &rest[2..2 + close];
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => out.push_str(&rest[..3 + close]),
            }
            rest = &rest[3 + close..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

struct Sources<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
}

impl Sources<'_> {
    async fn secret(&self, name: &str, optional: bool) -> Result<BTreeMap<String, String>, String> {
        let Some(secret) =
            source::<Secret>(self.client, self.namespace, "secret", name, optional).await?
        else {
            return Ok(BTreeMap::new());
        };
        let mut data: BTreeMap<String, String> = secret.string_data.unwrap_or_default();
        for (k, v) in secret.data.unwrap_or_default() {
            data.insert(k, String::from_utf8_lossy(&v.0).into_owned());
        }
        Ok(data)
    }

    async fn config_map(
        &self,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, String>, String> {
        let cm =
            source::<ConfigMap>(self.client, self.namespace, "configmap", name, optional).await?;
        Ok(cm.and_then(|cm| cm.data).unwrap_or_default())
    }
}

/// Secret or ConfigMap `name` (`kind` in messages) of `namespace`, as the kubelet reads a source
/// for the environment or a volume: missing is `None` when `optional`, else an error naming it.
pub(super) async fn source<K>(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    name: &str,
    optional: bool,
) -> Result<Option<K>, String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
    {
        Ok(Some(object)) => Ok(Some(object)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("{kind} \"{name}\" not found")),
        Err(e) => Err(format!("reading {kind} \"{name}\": {e}")),
    }
}

fn pick(
    data: &BTreeMap<String, String>,
    key: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<String>, String> {
    match data.get(key) {
        Some(v) => Ok(Some(v.clone())),
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(format!(
            "couldn't find key {key} in {kind} {namespace}/{name}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_the_kubelet() {
        let vars = BTreeMap::from([("A", "1"), ("B", "two")]);
        let e = |s: &str| expand(s, &vars);
        assert_eq!(e("$(A)-$(B)"), "1-two");
        assert_eq!(e("$(C) stays"), "$(C) stays");
        assert_eq!(e("$$(A) is literal"), "$(A) is literal");
        assert_eq!(e("a $ alone"), "a $ alone");
        assert_eq!(e("$(A"), "$(A");
    }
}
