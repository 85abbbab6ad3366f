//! The plugin stages' tables (`[parse]`, `[[transform]]`, `[aggregate]`, `[process]`, a Wasm
//! `[sink]`, `expect` plugins): the component, its config, its grants and its limits, each
//! checked and its relative paths resolved against the pipeline file's directory.

use super::*;

/// What checking a stage table needs: where relative paths start, the pipeline's name (in the
/// stage's), and how an error names its key.
pub(super) struct Stages<'a> {
    pub base: &'a Path,
    pub name: &'a str,
    pub invalid: &'a dyn Fn(&str, String) -> PipelineError,
    /// `[registry]`, for the stages that `grants.registry`.
    pub registry: Option<&'a weir_schema::RegistryConfig>,
}

impl Stages<'_> {
    /// The stage table under `key` as the sandbox takes it.
    pub(super) fn stage(&self, key: &str, s: StageFile) -> Result<StageSpec, PipelineError> {
        let invalid = self.invalid;
        let rel = |p: &Path| self.base.join(p);
        if s.parallelism.is_some() && key != "parse" {
            return Err(invalid(&format!("{key}.parallelism"), "only [parse] runs in parallel; remove it".into()));
        }
        let config_json =
            serde_json::to_string(&s.config).map_err(|e| invalid(&format!("{key}.config"), e.to_string()))?;
        let limits = s.limits.validate().map_err(|b| invalid(&format!("{key}.limits.{}", b.key), b.message))?;
        let g = s.grants;
        if g.stdout && key != "sink" {
            return Err(invalid(
                &format!("{key}.grants.stdout"),
                "only a [sink] may write to standard output (where `weir test` prints rows); drop it here".into(),
            ));
        }
        let registry = match (g.registry, self.registry) {
            (false, _) => None,
            (true, Some(r)) => Some(r.clone()),
            (true, None) => {
                return Err(invalid(
                    &format!("{key}.grants.registry"),
                    "the pipeline names no schema registry: add [registry] with its url, e.g. url = \
                     \"http://localhost:8081\""
                        .into(),
                ));
            }
        };
        let grants = Grants {
            dirs: g
                .dirs
                .into_iter()
                .map(|d| DirGrant { host: rel(&d.host), guest: d.guest, writable: d.writable })
                .collect(),
            env: g.env,
            clocks: g.clocks,
            random: g.random,
            network: g.network,
            http: g.http,
            stdout: g.stdout,
            registry,
        };
        grants.validate().map_err(|b| invalid(&format!("{key}.grants.{}", b.key), b.message))?;
        Ok(StageSpec {
            name: format!("{}/{key} ({})", self.name, s.plugin.file_name().map_or("?".into(), |f| f.to_string_lossy())),
            component: rel(&s.plugin),
            config_json,
            grants,
            limits,
        })
    }

    /// `[parse]` and how many parsers run side by side; a flow reading a dataset may have none.
    pub(super) fn parse(
        &self,
        parse: Option<StageFile>,
        source: &SourceConfig,
    ) -> Result<(Option<StageSpec>, usize), PipelineError> {
        let invalid = self.invalid;
        let parallelism = parse.as_ref().and_then(|p| p.parallelism).unwrap_or(DEFAULT_PARSE_PARALLELISM);
        if !(1..=MAX_PARSE_PARALLELISM).contains(&parallelism) {
            return Err(invalid("parse.parallelism", format!("{parallelism}: allowed 1 to {MAX_PARSE_PARALLELISM}")));
        }
        let parse = match parse {
            Some(p) => Some(self.stage("parse", p)?),
            None if matches!(source.kind, SourceKind::Dataset(_)) => None,
            None => {
                return Err(invalid(
                    "parse",
                    "missing: name the parser that turns records into events, e.g. [parse] plugin = \"parser.wasm\" \
                     (a flow reading a dataset may leave it out: the dataset's rows come with their keys and event \
                     times)"
                        .into(),
                ));
            }
        };
        Ok((parse, parallelism))
    }
}

/// `expect`: each a name (unique, like a field name) and exactly one of `rule` and `plugin`.
pub(super) fn expectations(
    list: Vec<super::file::ExpectFile>,
    stage: &dyn Fn(&str, StageFile) -> Result<StageSpec, PipelineError>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Vec<Expectation>, PipelineError> {
    use crate::expect::{MAX_EXPECTATIONS, Rule};
    if list.len() > MAX_EXPECTATIONS {
        return Err(invalid("expect", format!("{} expectations; a flow has at most {MAX_EXPECTATIONS}", list.len())));
    }
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, e) in list.into_iter().enumerate() {
        let key = |k: &str| format!("expect[{i}].{k}");
        let ok = !e.name.is_empty()
            && e.name.len() <= MAX_DATASET_NAME
            && e.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(invalid(
                &key("name"),
                format!("`{}`: letters, digits, `_` or `-`, e.g. \"valid_amount\"", e.name),
            ));
        }
        if !names.insert(e.name.clone()) {
            return Err(invalid(
                &key("name"),
                format!("`{}` is the name of an earlier expectation; names must differ", e.name),
            ));
        }
        let check = match (e.rule, e.plugin) {
            (Some(rule), None) => {
                if !e.config.is_empty() || granted(&e.grants) || e.limits != LimitsFile::default() {
                    return Err(invalid(
                        &key("rule"),
                        "a rule has no config, grants or limits (a plugin does); remove them".into(),
                    ));
                }
                ExpectCheck::Rule(Rule::parse(&rule).map_err(|m| invalid(&key("rule"), m))?)
            }
            (None, Some(plugin)) => {
                let file =
                    StageFile { plugin, parallelism: None, config: e.config, grants: e.grants, limits: e.limits };
                ExpectCheck::Plugin(Box::new(stage(&format!("expect[{i}]"), file)?))
            }
            _ => {
                return Err(invalid(
                    &key("rule"),
                    "give exactly one of rule = \"amount > 0\" (built in) and plugin = \"check.wasm\" (a transform \
                     whose dropped rows violate it)"
                        .into(),
                ));
            }
        };
        out.push(Expectation { name: e.name, check, on_violation: e.on_violation });
    }
    Ok(out)
}
