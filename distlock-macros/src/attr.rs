//! The attribute's arguments: `key = "..."` (or `keys = ["...", ...]`), `wait = "...",
//! lease = "...", backend = "...", kind = "...", permits = N, on_lost = "...", hold_at_least = "..."`, parsed with the span of every value so that errors point
//! at it. The key may also come first without its name: `#[distributed_lock("order:<id>")]`.

use std::time::Duration;

use distlock_config::DurationUse;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

/// The arguments the attribute knows, in the order the docs list them.
const KNOWN: &[&str] = &[
    "key",
    "keys",
    "wait",
    "lease",
    "backend",
    "kind",
    "permits",
    "on_lost",
    "hold_at_least",
];

/// The parsed arguments of one `#[distributed_lock(...)]`.
pub(crate) struct Args {
    pub key: Option<KeyArg>,
    /// `keys = ["account:<from>", "account:<to>"]`: a multi-key lock (instead of `key`).
    pub keys: Option<Vec<KeyArg>>,
    pub wait: Option<Duration>,
    pub lease: Option<LeaseArg>,
    pub backend: Option<LitStr>,
    /// `kind = "..."`: `reentrant` (the default), `fair`, `read`, `write`, `semaphore` or
    /// `fair_semaphore`.
    pub kind: Option<String>,
    /// `permits = N` (with a semaphore kind only): the semaphore's number of permits.
    pub permits: Option<u32>,
    /// `on_lost = "cancel"` (the default) or `"signal"`.
    pub on_lost: Option<OnLostArg>,
    /// `hold_at_least = "30s"`: a run-once job's least hold (on the server's clock).
    pub hold_at_least: Option<Duration>,
}

/// `on_lost = "cancel" | "signal"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLostArg {
    Cancel,
    Signal,
}

/// `key = "order:<user_id>"`.
pub(crate) struct KeyArg {
    pub lit: LitStr,
    pub template: Vec<Piece>,
}

/// One piece of a key template.
#[derive(Debug, PartialEq)]
pub(crate) enum Piece {
    /// Text copied as is.
    Text(String),
    /// `<root.field.sub>`: a parameter, then field accesses (names or tuple indexes).
    Placeholder { root: String, fields: Vec<String> },
}

/// `lease = "auto"` or `lease = "30s"`.
pub(crate) enum LeaseArg {
    Auto,
    Fixed(Duration),
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Args> {
        let mut args = Args {
            key: None,
            keys: None,
            wait: None,
            lease: None,
            backend: None,
            kind: None,
            permits: None,
            on_lost: None,
            hold_at_least: None,
        };
        // Which arguments were given, to report repeats.
        let mut seen: Vec<String> = Vec::new();
        // The names as written, in order, and the `kind` value: where conflicts are reported.
        let mut names: Vec<Ident> = Vec::new();
        let mut kind_value: Option<Expr> = None;
        let mut hold_value: Option<LitStr> = None;
        // Errors that do not stop parsing: all of them are reported together.
        let mut errors: Vec<syn::Error> = Vec::new();

        // The key first, without its name: `#[distributed_lock("order:<user_id>")]`.
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            seen.push("key".to_owned());
            match parse_key(lit) {
                Ok(k) => args.key = Some(k),
                Err(e) => errors.push(e),
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }

        while !input.is_empty() {
            if input.peek(LitStr) {
                let lit: LitStr = input.parse()?;
                return Err(syn::Error::new_spanned(
                    &lit,
                    "a string without a name is taken as the key only when it comes first; \
                     name every other argument, e.g. `wait = \"5s\"`",
                ));
            }
            // `parse_any` so that a keyword (`type = ...`) gets "unknown argument", not a
            // syntax error.
            let name = Ident::parse_any(input)?;
            if !input.peek(Token![=]) {
                let msg = if KNOWN.contains(&name.to_string().as_str()) {
                    format!("`{name}` needs a value: write `{name} = \"...\"`")
                } else {
                    format!(
                        "unknown argument `{name}`; #[distributed_lock] takes {}, each as `name = \"value\"`",
                        list(KNOWN)
                    )
                };
                return Err(syn::Error::new_spanned(&name, msg));
            }
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }

            let name_str = name.to_string();
            if KNOWN.contains(&name_str.as_str()) && seen.contains(&name_str) {
                errors.push(syn::Error::new_spanned(
                    &name,
                    format!("`{name_str}` is given more than once; give it once"),
                ));
                continue;
            }
            seen.push(name_str.clone());
            names.push(name.clone());
            if name_str == "kind" {
                kind_value = Some(value.clone());
            }

            let result = match name_str.as_str() {
                "key" => string(&name_str, &value, "\"order:<user_id>\"")
                    .and_then(parse_key)
                    .map(|k| args.key = Some(k)),
                "wait" => string(&name_str, &value, "\"5s\"")
                    .and_then(parse_wait)
                    .map(|w| args.wait = Some(w)),
                "lease" => string(&name_str, &value, "\"auto\" or \"30s\"")
                    .and_then(parse_lease)
                    .map(|l| args.lease = Some(l)),
                "backend" => string(&name_str, &value, "\"main\"")
                    .and_then(parse_backend)
                    .map(|b| args.backend = Some(b)),
                "keys" => parse_keys(&value).map(|k| args.keys = Some(k)),
                "kind" => parse_kind(&value).map(|k| args.kind = Some(k)),
                "permits" => parse_permits(&value).map(|p| args.permits = Some(p)),
                "on_lost" => string(&name_str, &value, "\"cancel\" or \"signal\"")
                    .and_then(parse_on_lost)
                    .map(|o| args.on_lost = Some(o)),
                "hold_at_least" => string(&name_str, &value, "\"30s\"")
                    .and_then(|lit| {
                        hold_value = Some(lit.clone());
                        parse_hold_at_least(lit)
                    })
                    .map(|h| args.hold_at_least = Some(h)),
                _ => Err(syn::Error::new_spanned(
                    &name,
                    format!(
                        "unknown argument `{name_str}`; #[distributed_lock] takes {}",
                        list(KNOWN)
                    ),
                )),
            };
            if let Err(e) = result {
                errors.push(e);
            }
        }

        if !seen.iter().any(|s| s == "key" || s == "keys") {
            errors.push(syn::Error::new(
                Span::call_site(),
                "#[distributed_lock] needs a `key`, e.g. #[distributed_lock(key = \"order:<user_id>\")] \
                 (or `keys = [\"a:<x>\", \"b:<y>\"]` to lock several keys at once)",
            ));
        }
        // `keys` with `key`: reported on the second of the two names; `keys` with a kind
        // other than reentrant: on the kind.
        if seen.iter().any(|s| s == "key") && seen.iter().any(|s| s == "keys") {
            let second = names
                .iter()
                .filter(|n| *n == "key" || *n == "keys")
                .nth(1)
                .or_else(|| names.iter().find(|n| *n == "keys"));
            if let Some(name) = second {
                errors.push(syn::Error::new_spanned(
                    name,
                    "give either `key` (one lock) or `keys` (several keys locked together), not both",
                ));
            }
        }
        if let (Some(kind), Some(value), true) = (&args.kind, &kind_value, args.keys.is_some()) {
            if kind != "reentrant" {
                errors.push(syn::Error::new_spanned(
                    value,
                    format!(
                        "`keys` locks several reentrant locks together; kind {kind:?} is not \
                         available with it (leave `kind` out)"
                    ),
                ));
            }
        }
        // `hold_at_least`: a reentrant lock on one key, held at most its fixed lease.
        if let (Some(hold), Some(lit)) = (args.hold_at_least, &hold_value) {
            if args.keys.is_some() {
                errors.push(syn::Error::new_spanned(
                    lit,
                    "`hold_at_least` (a run-once job) takes one `key`, not `keys`",
                ));
            }
            if let Some(kind) = args.kind.as_deref().filter(|k| *k != "reentrant") {
                errors.push(syn::Error::new_spanned(
                    lit,
                    format!(
                        "`hold_at_least` (a run-once job) is for reentrant locks; kind {kind:?} \
                         is not available with it (leave `kind` out)"
                    ),
                ));
            }
            if let Some(LeaseArg::Fixed(lease)) = &args.lease {
                if hold > *lease {
                    errors.push(syn::Error::new_spanned(
                        lit,
                        "`hold_at_least` is longer than the fixed `lease`, which is the longest \
                         the lock is held: make the lease at least as long",
                    ));
                }
            }
        }
        // A semaphore: `kind = "semaphore"` (or "fair_semaphore") and `permits = N` go
        // together.
        let semaphore = is_semaphore(args.kind.as_deref());
        let permits_name = names.iter().find(|n| *n == "permits");
        match (semaphore, permits_name, &kind_value) {
            (false, Some(name), _) if seen.iter().all(|s| s != "kind") => {
                errors.push(syn::Error::new_spanned(
                    name,
                    "`permits` is the number of permits of a semaphore: add `kind = \"semaphore\"`, or leave `permits` out",
                ));
            }
            (false, Some(name), _) if args.kind.is_some() => {
                errors.push(syn::Error::new_spanned(
                    name,
                    format!(
                        "`permits` goes with `kind = \"semaphore\"` or `\"fair_semaphore\"` only, not with kind {:?}",
                        args.kind.as_deref().unwrap_or_default()
                    ),
                ));
            }
            (true, None, Some(value)) => {
                errors.push(syn::Error::new_spanned(
                    value,
                    "a semaphore needs its number of permits: add e.g. `permits = 4`",
                ));
            }
            _ => {}
        }
        if semaphore && args.on_lost == Some(OnLostArg::Signal) {
            if let Some(name) = names.iter().find(|n| *n == "on_lost") {
                errors.push(syn::Error::new_spanned(
                    name,
                    "`on_lost = \"signal\"` is not available with a semaphore kind: a semaphore's body is dropped at its next `.await` when its lease is lost",
                ));
            }
        }
        match combine(errors) {
            Some(e) => Err(e),
            None => Ok(args),
        }
    }
}

/// `permits = 4`: an integer literal from 1 to 2147483647.
fn parse_permits(value: &Expr) -> syn::Result<u32> {
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            "`permits` takes an integer literal, e.g. `permits = 4`",
        ));
    };
    match int.base10_parse::<u32>() {
        Ok(0) => Err(syn::Error::new_spanned(
            int,
            "`permits = 0` admits nobody: a semaphore needs at least 1 permit",
        )),
        Ok(n) if n <= i32::MAX as u32 => Ok(n),
        _ => Err(syn::Error::new_spanned(
            int,
            "`permits` is at most 2147483647",
        )),
    }
}

/// All errors as one (reported together), or `None`.
pub(crate) fn combine(errors: impl IntoIterator<Item = syn::Error>) -> Option<syn::Error> {
    errors.into_iter().reduce(|mut all, e| {
        all.combine(e);
        all
    })
}

/// `a`, `b` and `c`.
pub(crate) fn list(names: &[impl AsRef<str>]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{}`", n.as_ref())).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The value as a string literal.
fn string(name: &str, value: &Expr, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{name}` takes a string literal, e.g. `{name} = {example}`"),
        )),
    }
}

fn parse_key(lit: LitStr) -> syn::Result<KeyArg> {
    match parse_template(&lit.value()) {
        Ok(template) => Ok(KeyArg { lit, template }),
        Err(why) => Err(syn::Error::new_spanned(
            &lit,
            format!("invalid key template: {why}"),
        )),
    }
}

/// `keys = ["account:<from>", "account:<to>"]`: at least one template, none repeated.
fn parse_keys(value: &Expr) -> syn::Result<Vec<KeyArg>> {
    let Expr::Array(array) = value else {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` takes an array of key templates, e.g. `keys = [\"account:<from>\", \"account:<to>\"]`",
        ));
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new_spanned(
            value,
            "`keys` is empty: name at least one key template, e.g. `keys = [\"account:<from>\", \"account:<to>\"]`",
        ));
    }
    let mut keys: Vec<KeyArg> = Vec::new();
    let mut errors = Vec::new();
    for elem in &array.elems {
        let parsed =
            string("keys", elem, "[\"account:<from>\", \"account:<to>\"]").and_then(parse_key);
        match parsed {
            Ok(k) if keys.iter().any(|other| other.lit.value() == k.lit.value()) => {
                errors.push(syn::Error::new_spanned(
                    &k.lit,
                    "this key template is given twice in `keys`; give it once",
                ));
            }
            Ok(k) => keys.push(k),
            Err(e) => errors.push(e),
        }
    }
    match combine(errors) {
        Some(e) => Err(e),
        None => Ok(keys),
    }
}

fn parse_wait(lit: LitStr) -> syn::Result<Duration> {
    let d = distlock_config::parse_duration(&lit.value()).map_err(|why| {
        syn::Error::new_spanned(
            &lit,
            format!("`wait`: {why}; write e.g. \"250ms\", \"5s\" or \"1m30s\" (\"0s\" tries once)"),
        )
    })?;
    in_range(&lit, DurationUse::Wait, d)
}

/// `d` (written at `lit`) checked against the range of `what`: the one table of valid
/// durations the builders, the TOML configuration and the `distlock` command use too.
fn in_range(lit: &LitStr, what: DurationUse, d: Duration) -> syn::Result<Duration> {
    distlock_config::check_duration(what, d)
        .map_err(|e| syn::Error::new_spanned(lit, e.to_string()))
}

fn parse_hold_at_least(lit: LitStr) -> syn::Result<Duration> {
    match distlock_config::parse_duration(&lit.value()) {
        Ok(d) if d.is_zero() => Err(syn::Error::new_spanned(
            &lit,
            "`hold_at_least` must be greater than 0 (leave it out for a lock released at once)",
        )),
        Ok(d) => in_range(&lit, DurationUse::HoldAtLeast, d),
        Err(why) => Err(syn::Error::new_spanned(
            &lit,
            format!("`hold_at_least`: {why}"),
        )),
    }
}

fn parse_lease(lit: LitStr) -> syn::Result<LeaseArg> {
    let s = lit.value();
    if s == "auto" {
        return Ok(LeaseArg::Auto);
    }
    match distlock_config::parse_duration(&s) {
        Ok(d) if d.is_zero() => Err(syn::Error::new_spanned(
            &lit,
            "`lease`: a lease must be greater than 0: use \"auto\" (renewed by the watchdog) or a duration such as \"30s\"",
        )),
        Ok(d) => in_range(&lit, DurationUse::Lease, d).map(LeaseArg::Fixed),
        Err(why) => Err(syn::Error::new_spanned(
            &lit,
            format!("`lease`: {why}; a lease is \"auto\" or a duration such as \"30s\""),
        )),
    }
}

fn parse_backend(lit: LitStr) -> syn::Result<LitStr> {
    if lit.value().is_empty() {
        return Err(syn::Error::new_spanned(
            &lit,
            "`backend` is empty: name a backend from `[backends.NAME]`, or leave `backend` out for the default one",
        ));
    }
    Ok(lit)
}

fn parse_on_lost(lit: LitStr) -> syn::Result<OnLostArg> {
    match lit.value().as_str() {
        "cancel" => Ok(OnLostArg::Cancel),
        "signal" => Ok(OnLostArg::Signal),
        other => Err(syn::Error::new_spanned(
            &lit,
            format!(
                "unknown `on_lost` {other:?}: \"cancel\" (the default) drops the body at its next \
                 `.await` when the lease is lost; \"signal\" lets it run on and shows the loss \
                 through `distlock::lease_lost()`"
            ),
        )),
    }
}

/// Whether `kind` is a semaphore's (`semaphore` or `fair_semaphore`).
pub(crate) fn is_semaphore(kind: Option<&str>) -> bool {
    matches!(kind, Some("semaphore" | "fair_semaphore"))
}

/// `kind = "reentrant"` or `kind = reentrant`; likewise `fair`, `read`, `write`, `semaphore`,
/// `fair_semaphore`.
fn parse_kind(value: &Expr) -> syn::Result<String> {
    let kind = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s.value(),
        Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            p.path.get_ident().map(Ident::to_string).unwrap_or_default()
        }
        _ => {
            return Err(syn::Error::new_spanned(
                value,
                "`kind` takes a string literal, e.g. `kind = \"reentrant\"`",
            ))
        }
    };
    match kind.as_str() {
        "reentrant" | "fair" | "read" | "write" | "semaphore" | "fair_semaphore" => Ok(kind),
        _ => Err(syn::Error::new_spanned(
            value,
            format!(
                "unknown lock kind {:?}; the kinds are \"reentrant\" (the default), \"fair\", \"read\", \"write\", \"semaphore\" and \"fair_semaphore\" (with `permits = N`)",
                kind
            ),
        )),
    }
}

/// Split a key template into text and `<placeholder>`s. The error says what is wrong.
pub(crate) fn parse_template(s: &str) -> Result<Vec<Piece>, String> {
    if s.is_empty() {
        return Err("the key is empty; write e.g. \"order:<user_id>\"".into());
    }
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else {
            return Err(format!(
                "the `<` at byte {} has no closing `>`; a placeholder is `<parameter>` or `<parameter.field>`",
                s.len() - rest.len() + open
            ));
        };
        let inner = &after[..close];
        pieces.push(Piece::Text(std::mem::take(&mut text)));
        pieces.push(parse_placeholder(inner)?);
        rest = &after[close + 1..];
    }
    text.push_str(rest);
    pieces.push(Piece::Text(text));
    pieces.retain(|p| !matches!(p, Piece::Text(t) if t.is_empty()));
    Ok(pieces)
}

fn parse_placeholder(inner: &str) -> Result<Piece, String> {
    let bad = |why: &str| {
        Err(format!(
            "placeholder `<{inner}>` {why}; a placeholder is `<parameter>` or `<parameter.field.sub>`"
        ))
    };
    if inner.is_empty() {
        return bad("is empty");
    }
    if inner.contains('<') {
        return bad("holds another `<`");
    }
    let mut segments = inner.split('.');
    let root = segments.next().unwrap_or_default();
    if !is_ident(root) {
        return bad(&format!(
            "starts with `{root}`, which is not a parameter name"
        ));
    }
    let mut fields = Vec::new();
    for seg in segments {
        if !(is_ident(seg) || is_index(seg)) {
            return bad(&format!(
                "has `{seg}` where a field name or a tuple index is expected"
            ));
        }
        fields.push(seg.to_owned());
    }
    Ok(Piece::Placeholder {
        root: root.to_owned(),
        fields,
    })
}

/// A plain identifier (ASCII; `self` included; not `_` alone, and no Rust keyword other than
/// `self`, since those cannot be parameter or field names).
pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s != "_"
        && (s == "self" || !is_keyword(s))
}

fn is_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

fn is_keyword(s: &str) -> bool {
    matches!(
        s,
        "as" | "async"
            | "await"
            | "break"
            | "const"
            | "continue"
            | "crate"
            | "dyn"
            | "else"
            | "enum"
            | "extern"
            | "false"
            | "fn"
            | "for"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "loop"
            | "match"
            | "mod"
            | "move"
            | "mut"
            | "pub"
            | "ref"
            | "return"
            | "Self"
            | "static"
            | "struct"
            | "super"
            | "trait"
            | "true"
            | "type"
            | "unsafe"
            | "use"
            | "where"
            | "while"
            | "abstract"
            | "become"
            | "box"
            | "do"
            | "final"
            | "gen"
            | "macro"
            | "override"
            | "priv"
            | "try"
            | "typeof"
            | "unsized"
            | "virtual"
            | "yield"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's table of the attribute's arguments names every argument it knows.
    #[test]
    fn the_readme_lists_every_argument() {
        let readme = include_str!("../../README.md");
        for name in KNOWN {
            assert!(
                readme.contains(&format!("| `{name}` | `{name} = ")),
                "README.md's table of the attribute's arguments lacks `{name}`"
            );
        }
    }

    fn ph(root: &str, fields: &[&str]) -> Piece {
        Piece::Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn templates() {
        assert_eq!(
            parse_template("order:<user_id>").unwrap(),
            vec![Piece::Text("order:".into()), ph("user_id", &[])]
        );
        assert_eq!(
            parse_template("<a>-<self.b.0>x").unwrap(),
            vec![
                ph("a", &[]),
                Piece::Text("-".into()),
                ph("self", &["b", "0"]),
                Piece::Text("x".into())
            ]
        );
        assert_eq!(
            parse_template("plain{}>").unwrap(),
            vec![Piece::Text("plain{}>".into())]
        );
        assert!(parse_template("").is_err());
        assert!(parse_template("a<b").unwrap_err().contains("no closing"));
        assert!(parse_template("a<>").unwrap_err().contains("is empty"));
        assert!(parse_template("a<b<c>").is_err());
        assert!(parse_template("<1a>").is_err());
        assert!(parse_template("<a..b>").is_err());
        assert!(parse_template("<a.>").is_err());
        assert!(parse_template("<a b>").is_err());
        assert!(parse_template("<type>").is_err());
        assert!(parse_template("<_>").is_err());
        assert!(parse_template("<a.01>").is_err());
    }

    #[test]
    fn lists() {
        assert_eq!(list(&["a"]), "`a`");
        assert_eq!(list(&["a", "b", "c"]), "`a`, `b` and `c`");
        assert_eq!(list(&[] as &[&str]), "");
    }
}
