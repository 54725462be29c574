//! Package names and the requirement lines a script may ask for.
//!
//! A script's dependency strings end up in a requirements file that pip reads on the
//! host, so they are held to a plain subset of PEP 508: a name, optional extras, version
//! specifiers and an environment marker. Direct references (`name @ url`), paths, pip
//! options (`--index-url`, `-r file`) and `${VAR}` expansion are refused: they would let a
//! script choose what the host fetches or reads.

/// The PEP 503 normalised form of a package name: lowercase, with each run of `-`, `_`
/// and `.` replaced by one `-` (`Foo.Bar__baz` is `foo-bar-baz`).
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.extend(c.to_lowercase());
            in_run = false;
        }
    }
    out
}

/// A requirement line accepted from a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Requirement {
    /// The normalised package name.
    pub name: String,
    /// The whole line in a canonical spelling: normalised name, blanks collapsed.
    pub line: String,
}

/// The longest requirement line accepted.
const MAX_LINE: usize = 256;

/// Parses one dependency string into a [`Requirement`], or says why it is refused.
pub(crate) fn parse_requirement(raw: &str) -> Result<Requirement, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("an empty dependency".into());
    }
    if s.starts_with('-') {
        return Err("pip options are not allowed".into());
    }
    if s.len() > MAX_LINE {
        return Err(format!("longer than {MAX_LINE} characters"));
    }
    let name_len = s
        .char_indices()
        .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .count();
    let (name, rest) = s.split_at(name_len);
    let name_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if !name_ok {
        return Err("it does not start with a package name".into());
    }
    if let Some(bad) = rest.chars().find(|c| !allowed_after_name(*c)) {
        return Err(format!(
            "{bad:?} is not allowed: only a name, [extras], version specifiers and a \
             ;marker (no URLs, paths or pip options)"
        ));
    }
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    if rest.split(' ').any(|token| token.starts_with('-')) {
        return Err("pip options are not allowed".into());
    }
    if let Some(first) = rest.chars().next() {
        if !matches!(first, '[' | '(' | ';' | '<' | '>' | '=' | '!' | '~') {
            return Err("unexpected text after the package name".into());
        }
    }
    let name = normalize_name(name);
    Ok(Requirement {
        line: format!("{name}{rest}"),
        name,
    })
}

/// The characters of extras, version specifiers and markers; `@`, `/`, `:`, `#`, `$`
/// and `\` are left out on purpose (URLs, paths, comments, variables).
fn allowed_after_name(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            ' ' | '\t'
                | '['
                | ']'
                | '('
                | ')'
                | ','
                | '.'
                | '*'
                | '+'
                | '-'
                | '_'
                | '<'
                | '>'
                | '='
                | '!'
                | '~'
                | ';'
                | '\''
                | '"'
        )
}

/// The project name at the start of a requirement as pip prints it
/// (`six>=99` is `six`), normalised.
pub(crate) fn name_of(requirement: &str) -> String {
    let end = requirement
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(requirement.len());
    normalize_name(&requirement[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_per_pep_503() {
        assert_eq!(normalize_name("Foo.Bar__baz"), "foo-bar-baz");
        assert_eq!(normalize_name("scikit_learn"), "scikit-learn");
        assert_eq!(normalize_name("PyYAML"), "pyyaml");
        assert_eq!(normalize_name("a-_.-b"), "a-b");
        assert_eq!(normalize_name("six"), "six");
    }

    #[test]
    fn plain_requirements_are_accepted_and_canonicalised() {
        let r = parse_requirement("  Requests >= 2.0 ,  <3 ").unwrap();
        assert_eq!(r.name, "requests");
        assert_eq!(r.line, "requests>= 2.0 , <3");
        let r = parse_requirement("rich[jupyter]; python_version >= '3.8'").unwrap();
        assert_eq!(r.name, "rich");
        assert_eq!(r.line, "rich[jupyter]; python_version >= '3.8'");
        assert_eq!(
            parse_requirement("Zope.Interface").unwrap().line,
            "zope-interface"
        );
        assert_eq!(parse_requirement("x==1.0.*").unwrap().name, "x");
    }

    #[test]
    fn urls_paths_and_options_are_refused() {
        for bad in [
            "",
            "   ",
            "pkg @ https://example.com/pkg.whl",
            "https://example.com/x.whl",
            "./local",
            "/etc/passwd",
            "-r /etc/passwd",
            "--index-url http://evil",
            "six --index-url=http://evil",
            "six -i x",
            "six # comment",
            "six==${HOME}",
            "-e .",
            "six\n--extra-index-url x",
            "_six",
            "six junk",
        ] {
            assert!(parse_requirement(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_requirement(&"a".repeat(300)).is_err());
    }

    #[test]
    fn name_of_reads_the_name_pip_prints() {
        assert_eq!(name_of("six>=99"), "six");
        assert_eq!(name_of("Foo_Bar[x]"), "foo-bar");
        assert_eq!(
            name_of("this-package-does-not-exist-xyz-123"),
            "this-package-does-not-exist-xyz-123"
        );
    }
}
