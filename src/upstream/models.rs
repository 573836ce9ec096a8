//! Which model a request goes to: aliases from config, the configured default, or the first
//! model the upstream lists (refreshed when the upstream says a model does not exist).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

use super::{list_models, Client, ModelCard};

pub struct Models {
    aliases: BTreeMap<String, String>,
    configured: Option<String>,
    discovered: RwLock<Vec<ModelCard>>,
    /// Names allowed as a metric label (everything else is `other`), shared with the labels.
    known: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl Models {
    pub fn new(aliases: BTreeMap<String, String>, configured: Option<String>) -> Models {
        let models = Models {
            aliases,
            configured,
            discovered: RwLock::new(Vec::new()),
            known: RwLock::new(HashSet::new()),
            other: Arc::from("other"),
        };
        models.rebuild_known();
        models
    }

    fn rebuild_known(&self) {
        let names: HashSet<Arc<str>> = self.known_names().into_iter().map(Arc::from).collect();
        if let Ok(mut k) = self.known.write() {
            *k = names;
        }
    }

    /// The metric label for a model name: itself when configured or discovered, else `other`.
    pub fn label(&self, name: &str) -> Arc<str> {
        let known = self.known.read().ok().and_then(|k| k.get(name).cloned());
        known.unwrap_or_else(|| self.other.clone())
    }

    /// The label of a request that names no model.
    pub fn other(&self) -> Arc<str> {
        self.other.clone()
    }

    /// The upstream name for what the client asked: an alias is resolved, a name passes.
    pub fn resolve<'a>(&'a self, requested: &'a str) -> &'a str {
        self.aliases
            .get(requested)
            .map(String::as_str)
            .unwrap_or(requested)
    }

    pub fn is_alias(&self, name: &str) -> bool {
        self.aliases.contains_key(name)
    }

    pub fn aliases(&self) -> &BTreeMap<String, String> {
        &self.aliases
    }

    /// The model for a request that names none.
    pub fn default_model(&self) -> Option<String> {
        if let Some(m) = &self.configured {
            return Some(self.resolve(m).to_string());
        }
        let found = self.discovered.read().ok()?;
        found.first().map(|m| m.id.clone())
    }

    /// Whether the default came from discovery (and so may be refreshed).
    pub fn is_discovered(&self) -> bool {
        self.configured.is_none()
    }

    pub fn cards(&self) -> Vec<ModelCard> {
        self.discovered
            .read()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// Every model name metrics may use as a label: aliases, targets, configured, discovered.
    pub fn known_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.aliases.keys().cloned().collect();
        names.extend(self.aliases.values().cloned());
        names.extend(self.configured.clone());
        names.extend(self.cards().into_iter().map(|c| c.id));
        names.sort();
        names.dedup();
        names
    }

    /// Set the discovered list (the fleet's, merged across pools) and the label set with it.
    pub fn set_cards(&self, cards: Vec<ModelCard>) {
        if let Ok(mut d) = self.discovered.write() {
            *d = cards;
        }
        self.rebuild_known();
    }

    /// Re-read the upstream's model list; returns whether it answered.
    pub async fn refresh(&self, client: &Client) -> bool {
        let Some(list) = list_models(client).await else {
            return false;
        };
        if let Ok(mut d) = self.discovered.write() {
            *d = list;
        }
        self.rebuild_known();
        true
    }
}
