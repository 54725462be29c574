//! The globs of an upstream's `allow` list: `*` stands for any run of characters (also
//! none), `?` for exactly one, every other character for itself. Matching is linear in
//! the pattern times the name, whatever the pattern.

/// One pattern of an `allow` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Vec<char>,
}

impl Glob {
    /// The pattern as written.
    pub fn new(pattern: &str) -> Self {
        Glob {
            pattern: pattern.chars().collect(),
        }
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        let (mut p, mut n) = (0, 0);
        // Where the last `*` was, and the name's position it stands for so far: on a
        // mismatch the star takes one more character (no backtracking beyond it).
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            match self.pattern.get(p) {
                Some('*') => {
                    star = Some((p, n));
                    p += 1;
                }
                Some('?') => {
                    p += 1;
                    n += 1;
                }
                Some(c) if *c == name[n] => {
                    p += 1;
                    n += 1;
                }
                _ => match star {
                    Some((at, from)) => {
                        p = at + 1;
                        n = from + 1;
                        star = Some((at, from + 1));
                    }
                    None => return false,
                },
            }
        }
        self.pattern[p..].iter().all(|c| *c == '*')
    }
}

impl std::fmt::Display for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.pattern.iter().try_for_each(|c| write!(f, "{c}"))
    }
}

/// Whether any of `globs` matches `name`.
pub fn any_matches(globs: &[Glob], name: &str) -> bool {
    globs.iter().any(|g| g.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, name: &str) -> bool {
        Glob::new(pattern).matches(name)
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(m("search_*", "search_issues"));
        assert!(m("search_*", "search_"));
        assert!(!m("search_*", "research_issues"));
        assert!(m("get_issue", "get_issue"));
        assert!(!m("get_issue", "get_issues"));
        assert!(!m("get_issue", "get_issu"));
        assert!(m("*", "anything"));
        assert!(m("*", ""));
        assert!(m("get_?", "get_a"));
        assert!(!m("get_?", "get_"));
        assert!(!m("get_?", "get_ab"));
        assert!(m("*_issue*", "get_issue_v2"));
        assert!(m("a*b*c", "aXXbYYbZZc"));
        assert!(!m("a*b*c", "aXXbYYbZZ"));
        assert!(m("é*", "échelle"));
        assert!(!m("", "x"));
        assert!(m("", ""));
    }

    #[test]
    fn many_stars_stay_linear() {
        let pattern = "*a".repeat(50) + "b";
        let name = "a".repeat(2000);
        let started = std::time::Instant::now();
        assert!(!m(&pattern, &name));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn any_of_a_list() {
        let allow = [Glob::new("search_*"), Glob::new("get_issue")];
        assert!(any_matches(&allow, "get_issue"));
        assert!(any_matches(&allow, "search_x"));
        assert!(!any_matches(&allow, "delete_issue"));
        assert!(!any_matches(&[], "get_issue"));
    }
}
