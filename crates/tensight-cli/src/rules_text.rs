//! `tensight rules` as text: the list (code, name and category in columns, the first
//! sentence of what each detects wrapped under them) and one rule's documentation
//! (paragraphs and list items wrapped, code blocks and tables as written, cut with `…`
//! only past the width). Wrapping is the report's own
//! ([`tensight::report::terminal::wrap_hanging`]).

use tensight::report::terminal::{fit, wrap_hanging};
use tensight::rules::RuleMeta;
use tensight::text::cut;

/// Indent of a rule's description under its code.
const HANG: &str = "      ";

/// Every rule in `metas`, one entry each, within `w` columns.
pub fn list(metas: &[&RuleMeta], w: usize) -> String {
    let name_w = metas.iter().map(|m| m.name.len()).max().unwrap_or(0);
    let mut s = String::new();
    for m in metas {
        // The columns (at most 55 wide) fit the narrowest width; `fit` cuts them if not.
        let head = format!("{:<5} {:<name_w$}  {}", m.code, m.name, m.category.label());
        s.push_str(head.trim_end());
        s.push('\n');
        s.push_str(&wrap_hanging(&summary(m.doc), w, HANG, HANG));
    }
    s.push('\n');
    s.push_str(&wrap_hanging(
        "`tensight rules CODE` prints a rule's documentation.",
        w,
        "",
        "",
    ));
    fit(&s, w, false)
}

/// One rule's documentation within `w` columns.
pub fn doc(m: &RuleMeta, w: usize) -> String {
    let mut s = wrap_hanging(&format!("# {} {}", m.code, m.name), w, "", "  ");
    s.push('\n');
    s.push_str(&wrap_hanging(
        &format!(
            "Category: {} · status: {:?} · since {}",
            m.category.label(),
            m.status,
            m.since
        ),
        w,
        "",
        "",
    ));
    s.push('\n');
    s.push_str(&markdown(m.doc, w));
    fit(&s, w, false)
}

/// The first sentence of a rule's doc: of the first paragraph that is not a heading.
fn summary(doc: &str) -> String {
    let para: Vec<&str> = doc
        .lines()
        .skip_while(|l| l.starts_with('#') || l.trim().is_empty())
        .take_while(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::trim)
        .collect();
    let para = para.join(" ");
    // A sentence ends at ". " followed by a capital letter (not "e.g. x").
    let b = para.as_bytes();
    let end = (0..b.len().saturating_sub(2))
        .find(|&i| b[i] == b'.' && b[i + 1] == b' ' && b[i + 2].is_ascii_uppercase())
        .map_or(para.len(), |i| i + 1);
    para[..end].to_string()
}

/// Markdown text wrapped to `w`: a paragraph's lines joined and wrapped, a list item
/// continuing under its text, headings, tables and fenced code as written (cut to `w`).
fn markdown(doc: &str, w: usize) -> String {
    let mut out = String::new();
    let mut para = String::new();
    let mut rest = String::new();
    let mut in_code = false;
    let flush = |out: &mut String, para: &mut String, rest: &str| {
        if !para.is_empty() {
            out.push_str(&wrap_hanging(para, w, "", rest));
            para.clear();
        }
    };
    for line in doc.lines() {
        let fence = line.trim_start().starts_with("```");
        if in_code || fence {
            flush(&mut out, &mut para, &rest);
            if fence {
                in_code = !in_code;
            }
            out.push_str(&cut(line, w));
            out.push('\n');
        } else if line.trim().is_empty() {
            flush(&mut out, &mut para, &rest);
            out.push('\n');
        } else if line.starts_with('#') || line.starts_with('|') {
            flush(&mut out, &mut para, &rest);
            out.push_str(&cut(line, w));
            out.push('\n');
        } else if let Some(n) = list_marker(line) {
            flush(&mut out, &mut para, &rest);
            rest = " ".repeat(n);
            para.push_str(line.trim_end());
        } else if para.is_empty() {
            rest.clear();
            para.push_str(line.trim());
        } else {
            para.push(' ');
            para.push_str(line.trim());
        }
    }
    flush(&mut out, &mut para, &rest);
    out
}

/// The width of a list item's marker (`- `, `* `, `1. `) with its indent, if `line`
/// starts one.
fn list_marker(line: &str) -> Option<usize> {
    let body = line.trim_start();
    let lead = line.len() - body.len();
    if body.starts_with("- ") || body.starts_with("* ") {
        return Some(lead + 2);
    }
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && body[digits..].starts_with(". ")).then_some(lead + digits + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_the_first_sentence() {
        let doc =
            "## What it detects\nA thing that\nspans lines, e.g. this. Then more.\n\n## Why\nx";
        assert_eq!(summary(doc), "A thing that spans lines, e.g. this.");
    }

    #[test]
    fn markdown_wraps_prose_and_keeps_code() {
        let long = "word ".repeat(40);
        let code = format!("    {}", "x".repeat(100));
        let doc = format!("## H\n{long}\n- item {long}\n\n```python\n{code}\nshort()\n```\n");
        let out = markdown(&doc, 60);
        assert!(out.lines().all(|l| l.chars().count() <= 60), "{out}");
        assert!(out.contains("\nshort()\n"), "{out}");
        assert!(out.contains(&format!("{}…", &code[..59])), "{out}");
        // A list item continues under its text.
        assert!(out.lines().any(|l| l.starts_with("  word")), "{out}");
    }
}
