//! `${ENV_VAR}` interpolation in string values.

use std::env::VarError;

/// Looks an environment variable up; `std::env::var` in production.
pub(crate) type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// Replaces every `${NAME}` in `s` with the value of the environment variable `NAME`, and every
/// `$$` with a literal `$`. A `$` followed by anything else is kept as is. The replacement is
/// not interpolated again.
///
/// The error says what is wrong (an unset variable, a `${` without `}`, a bad name); the caller
/// adds the field and the line.
pub(crate) fn interpolate(s: &str, env: EnvLookup<'_>) -> Result<String, String> {
    if !s.contains('$') {
        return Ok(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(inner) = after.strip_prefix('{') {
            let Some(close) = inner.find('}') else {
                return Err(
                    "`${` is not closed by `}` (write `${NAME}`, or `$$` for a literal `$`)"
                        .to_owned(),
                );
            };
            let name = &inner[..close];
            check_name(name)?;
            match env(name) {
                Ok(value) => out.push_str(&value),
                Err(VarError::NotPresent) => {
                    return Err(format!(
                        "environment variable `{name}` is not set (used as `${{{name}}}`; write `$$` for a literal `$`)"
                    ))
                }
                Err(VarError::NotUnicode(_)) => {
                    return Err(format!(
                        "environment variable `{name}` is not valid UTF-8"
                    ))
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(
            "`${}` names no environment variable (write `${NAME}`, or `$$` for a literal `$`)"
                .to_owned(),
        );
    }
    let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`${{{name}}}`: invalid environment variable name {name:?} (use letters, digits and `_`, not starting with a digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<String, VarError> {
        match name {
            "HOST" => Ok("redis.local".to_owned()),
            "EMPTY" => Ok(String::new()),
            "DOLLAR" => Ok("${HOST}".to_owned()),
            _ => Err(VarError::NotPresent),
        }
    }

    fn run(s: &str) -> Result<String, String> {
        interpolate(s, &env)
    }

    #[test]
    fn replaces_variables() {
        assert_eq!(run("plain").as_deref(), Ok("plain"));
        assert_eq!(run("${HOST}").as_deref(), Ok("redis.local"));
        assert_eq!(
            run("redis://${HOST}:6379/${EMPTY}0").as_deref(),
            Ok("redis://redis.local:6379/0")
        );
        assert_eq!(
            run("${HOST}${HOST}").as_deref(),
            Ok("redis.localredis.local")
        );
        // Values are not interpolated again.
        assert_eq!(run("${DOLLAR}").as_deref(), Ok("${HOST}"));
    }

    #[test]
    fn dollars() {
        assert_eq!(run("$$").as_deref(), Ok("$"));
        assert_eq!(run("a$$b").as_deref(), Ok("a$b"));
        assert_eq!(run("$${HOST}").as_deref(), Ok("${HOST}"));
        assert_eq!(run("$$$${HOST}").as_deref(), Ok("$${HOST}"));
        assert_eq!(run("$$${HOST}").as_deref(), Ok("$redis.local"));
        assert_eq!(run("p$ss").as_deref(), Ok("p$ss"));
        assert_eq!(run("end$").as_deref(), Ok("end$"));
        assert_eq!(run("é$ü").as_deref(), Ok("é$ü"));
    }

    #[test]
    fn errors() {
        let err = run("x${NOPE}y").unwrap_err();
        assert!(
            err.contains("environment variable `NOPE` is not set"),
            "{err}"
        );
        let err = run("${HOST").unwrap_err();
        assert!(err.contains("`${` is not closed by `}`"), "{err}");
        let err = run("${}").unwrap_err();
        assert!(err.contains("names no environment variable"), "{err}");
        let err = run("${A-B}").unwrap_err();
        assert!(
            err.contains("invalid environment variable name \"A-B\""),
            "{err}"
        );
        let err = run("${1A}").unwrap_err();
        assert!(err.contains("invalid environment variable name"), "{err}");
    }
}
