//! `GET /metrics` as the tests read it: parsed by a real Prometheus text-format parser
//! (`prom_text_format_parser`, MIT OR Apache-2.0), never by splitting lines here. A
//! histogram's `_bucket`, `_sum` and `_count` samples are looked up under those names,
//! as Prometheus would store them.
//!
//! Note: that parser keeps label values as written (escapes included); no label value of
//! ours needs escaping (queue names are `[A-Za-z0-9._:/@-]`, route labels are fixed).

use std::collections::{BTreeMap, BTreeSet};

use prom_text_format_parser::{Metric, Scrape, Type, ValueType};

/// One parsed exposition.
#[derive(Debug)]
pub struct Exposition {
    pub metrics: Vec<Metric>,
}

/// A series' labels, sorted by name.
pub type Labels = BTreeMap<String, String>;

fn labels_of(s: &prom_text_format_parser::Sample) -> Labels {
    s.labels
        .iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect()
}

impl Exposition {
    /// Parses `text`, panicking (with the parser's error) on anything malformed, and
    /// checks what the parser leaves to its caller: each family once, no series twice.
    #[track_caller]
    pub fn parse(text: &str) -> Exposition {
        let scrape = Scrape::parse(text)
            .unwrap_or_else(|e| panic!("/metrics does not parse: {e:?}\n{text}"));
        let mut families = BTreeSet::new();
        let mut series = BTreeSet::new();
        for m in &scrape.metrics {
            assert!(families.insert(m.name.clone()), "{} declared twice", m.name);
            for s in &m.samples {
                let key = (
                    m.name.clone(),
                    format!("{:?}", s.value.value_type),
                    labels_of(s),
                );
                assert!(series.insert(key.clone()), "series twice: {key:?}");
            }
        }
        Exposition {
            metrics: scrape.metrics,
        }
    }

    /// Every family's name and type (`counter`, `gauge`, `histogram`, `untyped`).
    pub fn families(&self) -> BTreeMap<String, String> {
        self.metrics
            .iter()
            .map(|m| (m.name.clone(), m.kind.to_string()))
            .collect()
    }

    /// The family `name` and which of its samples `name` means: itself, or a
    /// histogram's `_bucket`, `_sum`, `_count`.
    fn family_of(&self, name: &str) -> Option<(&Metric, ValueType)> {
        if let Some(m) = self.metrics.iter().find(|m| m.name == name) {
            // A histogram's own name has no samples: its plain ones are `_bucket`.
            return (m.kind != Type::Histogram).then_some((m, ValueType::Sample));
        }
        [
            ("_bucket", ValueType::Sample),
            ("_sum", ValueType::Sum),
            ("_count", ValueType::Count),
        ]
        .into_iter()
        .find_map(|(suffix, vt)| {
            let base = name.strip_suffix(suffix)?;
            let m = self.metrics.iter().find(|m| m.name == base)?;
            (m.kind == Type::Histogram).then_some((m, vt))
        })
    }

    /// Every series of the sample name `name`: labels and value.
    pub fn series(&self, name: &str) -> Vec<(Labels, f64)> {
        let Some((m, vt)) = self.family_of(name) else {
            return Vec::new();
        };
        m.samples
            .iter()
            .filter(|s| s.value.value_type == vt)
            .map(|s| (labels_of(s), s.value.value.as_f64()))
            .collect()
    }

    /// The value of the series `name{labels}` (exactly those labels), if present.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.series(name)
            .into_iter()
            .find(|(l, _)| *l == want)
            .map(|(_, v)| v)
    }

    /// The sum of `name` over every series whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series(name)
            .into_iter()
            .filter(|(l, _)| {
                labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// Histograms are well formed: per series, buckets in increasing `le`, cumulative,
    /// ending in `+Inf` equal to `_count`, with a `_sum`.
    #[track_caller]
    pub fn check_histograms(&self) {
        for m in self.metrics.iter().filter(|m| m.kind == Type::Histogram) {
            let mut buckets: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            for (mut labels, v) in self.series(&format!("{}_bucket", m.name)) {
                let le = labels.remove("le").expect("a bucket has le");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le is a number")
                };
                buckets.entry(labels).or_default().push((le, v));
            }
            for (labels, b) in buckets {
                assert!(b.windows(2).all(|w| w[0].0 < w[1].0), "le order {labels:?}");
                assert!(
                    b.windows(2).all(|w| w[0].1 <= w[1].1),
                    "cumulative {labels:?}"
                );
                let (le, inf) = *b.last().expect("a bucket");
                assert_eq!(le, f64::INFINITY, "+Inf last in {labels:?}");
                let pairs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let count = self.value(&format!("{}_count", m.name), &pairs);
                assert_eq!(count, Some(inf), "+Inf == count for {labels:?}");
                let sum = self.value(&format!("{}_sum", m.name), &pairs);
                assert!(sum.is_some_and(|s| s >= 0.0), "sum of {labels:?}: {sum:?}");
            }
        }
    }
}
