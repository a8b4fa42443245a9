//! The mixture spec: a TOML file naming components (token stores, by a spec file
//! or a prepared entry) and their weights, and the view the mixture is made into.
//!
//! ```toml
//! name = "pile-mix-a"
//! [mix]
//! seed = 1234
//! total_tokens = "20B"      # each split's; or { train = "20B" }; without: no repetition
//! [[mix.components]]
//! spec = "pile-cc.toml"
//! weight = 0.6
//! [[mix.components]]
//! entry = "github-gpt2"
//! weight = 0.4
//! max_epochs = 4
//! [sequence]
//! seq_len = 2048
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::spec::{OutputSpec, SequenceSpec, Spec, SpecError, check_component, check_sequence, read_spec_file};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// Human name, used for `by-name/<name>`; not part of the fingerprint.
    pub name: String,
    pub mix: MixSpec,
    #[serde(default)]
    pub sequence: SequenceSpec,
    #[serde(default)]
    pub output: OutputSpec,
    /// Directory component spec paths are resolved against (the file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    /// Orders each component's rows, a new order every epoch.
    #[serde(default)]
    pub seed: u64,
    /// Document tokens of each mixed split (`"20B"`), or of the splits named
    /// (`{ train = "20B" }`; the others as many as need no repetition).
    #[serde(default)]
    pub total_tokens: Option<TotalTokens>,
    /// The splits to mix; every split all components have when not given.
    pub splits: Option<Vec<String>>,
    pub components: Vec<ComponentSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentSpec {
    /// A pipeline spec: its token store, built if it is not there.
    pub spec: Option<PathBuf>,
    /// A prepared entry's name or fingerprint: its token store.
    pub entry: Option<String>,
    pub weight: f64,
    pub max_epochs: Option<u64>,
}

/// `total_tokens`: one count for every mixed split, or a count per split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TotalTokens {
    Every(u64),
    PerSplit(BTreeMap<String, u64>),
}

impl TotalTokens {
    /// The total of `split`, if it has one.
    pub fn of(&self, split: &str) -> Option<u64> {
        match self {
            TotalTokens::Every(count) => Some(*count),
            TotalTokens::PerSplit(counts) => counts.get(split).copied(),
        }
    }

    /// For the fingerprint and the manifest.
    pub fn canonical(&self) -> serde_json::Value {
        match self {
            TotalTokens::Every(count) => serde_json::json!(count),
            TotalTokens::PerSplit(counts) => serde_json::json!(counts),
        }
    }
}

impl<'de> Deserialize<'de> for TotalTokens {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Count(Count),
            PerSplit(BTreeMap<String, Count>),
            Other(toml::Value),
        }
        let count = |count: Count| count.value().map_err(serde::de::Error::custom);
        match Given::deserialize(deserializer)? {
            Given::Count(one) => Ok(TotalTokens::Every(count(one)?)),
            Given::PerSplit(counts) => {
                let counts =
                    counts.into_iter().map(|(split, one)| Ok((split, count(one)?))).collect::<Result<_, _>>()?;
                Ok(TotalTokens::PerSplit(counts))
            }
            Given::Other(other) => Err(serde::de::Error::custom(format!(
                "invalid total_tokens {other}; write a count (20000000000, \"20B\") or a count per split ({{ train = \"20B\" }})"
            ))),
        }
    }
}

/// A token count as given: a whole number, or text with a decimal suffix.
#[derive(Deserialize)]
#[serde(untagged)]
enum Count {
    Number(u64),
    Text(String),
}

impl Count {
    fn value(self) -> Result<u64, String> {
        match self {
            Count::Number(count) => Ok(count),
            Count::Text(text) => parse_count(&text).ok_or_else(|| {
                format!("invalid token count {text:?}; write a number or e.g. \"500M\", \"20B\", \"1.5T\"")
            }),
        }
    }
}

impl ComponentSpec {
    /// How messages and the manifest name it.
    pub fn name(&self) -> String {
        match (&self.spec, &self.entry) {
            (Some(spec), _) => format!("spec {}", spec.display()),
            (None, Some(entry)) => format!("entry {entry}"),
            (None, None) => String::new(),
        }
    }
}

/// A spec file of either kind: a pipeline, or a mixture (it has `[mix]`).
pub enum AnySpec {
    Pipeline(Box<Spec>),
    Mixture(Box<MixtureSpec>),
}

impl AnySpec {
    pub fn load(path: &Path) -> Result<AnySpec, SpecError> {
        let (text, base_dir) = read_spec_file(path)?;
        let is_mixture = toml::from_str::<toml::Table>(&text).is_ok_and(|table| table.contains_key("mix"));
        Ok(match is_mixture {
            true => AnySpec::Mixture(Box::new(MixtureSpec::parse(&text, path, base_dir)?)),
            false => AnySpec::Pipeline(Box::new(Spec::parse(&text, path, base_dir)?)),
        })
    }

    pub fn name(&self) -> &str {
        match self {
            AnySpec::Pipeline(spec) => &spec.name,
            AnySpec::Mixture(mixture) => &mixture.name,
        }
    }
}

impl MixtureSpec {
    /// Parses mixture spec text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path, base_dir: PathBuf) -> Result<MixtureSpec, SpecError> {
        let mut spec: MixtureSpec = toml::from_str(text).map_err(|err| SpecError::Parse {
            path: path.to_path_buf(),
            message: err.to_string().trim_end().to_string(),
        })?;
        spec.base_dir = base_dir;
        spec.validate().map_err(|problem| SpecError::Invalid { path: path.to_path_buf(), problem })?;
        Ok(spec)
    }

    fn validate(&self) -> Result<(), String> {
        check_component("name", &self.name)?;
        if self.mix.components.is_empty() {
            return Err("[mix] has no components: add [[mix.components]] with spec = \"...\" or entry = \"...\"".into());
        }
        for (index, component) in self.mix.components.iter().enumerate() {
            let which = index + 1;
            if component.spec.is_some() == component.entry.is_some() {
                return Err(format!(
                    "mix.components[{which}] needs exactly one of spec = \"FILE\" or entry = \"NAME\""
                ));
            }
            if !(component.weight.is_finite() && component.weight > 0.0) {
                return Err(format!(
                    "mix.components[{which}].weight must be a positive number, not {}",
                    component.weight
                ));
            }
            if component.max_epochs == Some(0) {
                return Err(format!("mix.components[{which}].max_epochs must be at least 1"));
            }
        }
        let sum: f64 = self.mix.components.iter().map(|component| component.weight).sum();
        if !sum.is_finite() {
            return Err("mix.components' weights are too large to add up; scale them down".into());
        }
        let totals = match &self.mix.total_tokens {
            Some(TotalTokens::Every(count)) => vec![*count],
            Some(TotalTokens::PerSplit(counts)) => counts.values().copied().collect(),
            None => Vec::new(),
        };
        if totals.contains(&0) {
            return Err("mix.total_tokens must be at least 1".into());
        }
        if let Some(splits) = &self.mix.splits {
            if splits.is_empty() {
                return Err("mix.splits is empty: name at least one split to mix, or leave it out".into());
            }
            let mut seen = BTreeSet::new();
            for split in splits {
                check_component("split name", split)?;
                if !seen.insert(split) {
                    return Err(format!("mix.splits names {split:?} twice"));
                }
            }
        }
        if self.sequence.shuffle_seed.is_some() {
            return Err(
                "sequence.shuffle_seed does not go in a mixture: mix.seed orders each component's rows, and a \
                 shuffle of the mixed rows would undo the shares the interleaving keeps at every prefix"
                    .into(),
            );
        }
        check_sequence(&self.sequence, &self.output)?;
        self.output.formats.check(self.output.token_type, &self.sequence).map_err(|err| err.to_string())?;
        Ok(())
    }

    /// Resolves a component's spec path against the mixture file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }
}

fn parse_count(text: &str) -> Option<u64> {
    let text = text.trim().replace('_', "");
    let (number, scale) = match text.char_indices().last()? {
        (at, 'k' | 'K') => (&text[..at], 1e3),
        (at, 'M') => (&text[..at], 1e6),
        (at, 'B' | 'G') => (&text[..at], 1e9),
        (at, 'T') => (&text[..at], 1e12),
        _ => (text.as_str(), 1.0),
    };
    let value: f64 = number.trim().parse().ok()?;
    let count = value * scale;
    (count.is_finite() && count >= 0.0 && count < u64::MAX as f64).then_some(count.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MixtureSpec, SpecError> {
        MixtureSpec::parse(text, Path::new("mix.toml"), PathBuf::from("/data"))
    }

    const MIX: &str = r#"
name = "mix-a"
[mix]
seed = 3
total_tokens = "1.5M"
[[mix.components]]
spec = "a.toml"
weight = 0.6
[[mix.components]]
entry = "b-gpt2"
weight = 0.4
max_epochs = 4
"#;

    #[test]
    fn a_mixture_spec_reads_its_components_and_counts() {
        let mix = parse(MIX).unwrap();
        assert_eq!(mix.mix.total_tokens, Some(TotalTokens::Every(1_500_000)));
        assert_eq!(mix.mix.components[1].max_epochs, Some(4));
        assert_eq!(mix.mix.components[0].name(), "spec a.toml");
        assert_eq!(mix.resolve(Path::new("a.toml")), PathBuf::from("/data/a.toml"));
        assert_eq!(mix.sequence.seq_len, 1024);
    }

    #[test]
    fn counts_take_decimal_suffixes() {
        assert_eq!(parse_count("20B"), Some(20_000_000_000));
        assert_eq!(parse_count("500M"), Some(500_000_000));
        assert_eq!(parse_count("1_000"), Some(1000));
        assert_eq!(parse_count("lots"), None);
        let err = parse(&MIX.replace("\"1.5M\"", "\"many\"")).unwrap_err().to_string();
        assert!(err.contains("invalid token count") && err.contains("line"), "{err}");
        let per_split = parse(&MIX.replace("\"1.5M\"", "{ train = \"2k\" }")).unwrap().mix.total_tokens.unwrap();
        assert_eq!((per_split.of("train"), per_split.of("validation")), (Some(2000), None));
        let err = parse(&MIX.replace("\"1.5M\"", "-3")).unwrap_err().to_string();
        assert!(err.contains("invalid total_tokens") && err.contains("per split"), "{err}");
    }

    #[test]
    fn what_a_mixture_cannot_mean_is_refused() {
        let refused = [
            (MIX.replace("weight = 0.6", "weight = 0"), "positive"),
            (MIX.replace("entry = \"b-gpt2\"", "entry = \"b\"\nspec = \"b.toml\""), "exactly one"),
            (MIX.replace("max_epochs = 4", "max_epochs = 0"), "max_epochs"),
            (format!("{MIX}\n[sequence]\nshuffle_seed = 1\n"), "mix.seed"),
            (MIX.replace("seed = 3", "seed = 3\nweights = 1"), "weights"),
            (MIX.replace("seed = 3", "seed = 3\nsplits = [\"train\", \"train\"]"), "twice"),
            (MIX.replace("seed = 3", "seed = 3\nsplits = []"), "empty"),
            (MIX.replace("weight = 0.6", "weight = 1e308").replace("weight = 0.4", "weight = 1e308"), "too large"),
        ];
        for (text, named) in refused {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(named), "{named}: {err}");
        }
    }
}
