//! The HTML report (`--format html`): its structure on a real H200 bundle (sections,
//! both plots, links that land, nothing fetched from the network), an outline snapshot,
//! and a hostile trace whose op, kernel and thread names are markup, rendered escaped.
//! The same for the HTML diff (`tensight diff --format html`): a planted workload's
//! bundle against its fixed variant, and the hostile trace against a copy of it whose
//! kernels are twice as fast. The pages in a real browser are
//! tests/python/test_html_report.py.

use std::collections::HashSet;
use std::path::Path;
use tensight::report::html;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn bundle_html(name: &str) -> String {
    let dir = fixtures().join("bundles").join(name);
    let r = tensight::analyze_path(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    html::render(&r)
}

/// Values of `attr="..."` in `page`.
fn attrs<'a>(page: &'a str, attr: &str) -> Vec<&'a str> {
    let pat = format!(" {attr}=\"");
    page.match_indices(&pat)
        .filter_map(|(i, _)| {
            let rest = &page[i + pat.len()..];
            rest.find('"').map(|j| &rest[..j])
        })
        .collect()
}

/// What every page must be: one document, our one script, no fetch, links that land.
fn check_page(page: &str) {
    assert!(page.starts_with("<!doctype html>"), "not an HTML page");
    assert_eq!(
        page.matches("<script").count(),
        1,
        "one script: the table sorter"
    );
    assert_eq!(page.matches("</script>").count(), 1);
    for tag in [
        "<img", "<iframe", "<object", "<embed", "<link", "<base", "<form",
    ] {
        assert!(!page.contains(tag), "the page holds {tag}");
    }
    for bad in ["url(", "@import", " src=\"", "https://"] {
        assert!(!page.contains(bad), "the page could fetch something: {bad}");
    }
    let http: Vec<_> = page.match_indices("http://").collect();
    for (i, _) in http {
        assert!(
            page[i..].starts_with("http://www.w3.org/2000/svg"),
            "a URL other than the SVG namespace: {}",
            &page[i..(i + 60).min(page.len())]
        );
    }
    let ids: HashSet<&str> = attrs(page, "id").into_iter().collect();
    for href in attrs(page, "href") {
        let target = href
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("a link out of the page: {href}"));
        assert!(ids.contains(target), "a link to a missing anchor: {href}");
    }
}

/// The page's outline: sections, plot sizes, findings, table rows (the snapshot).
fn outline(page: &str) -> String {
    let mut out = String::new();
    for id in attrs(page, "id") {
        if !(id.starts_with("op-")
            || id.starts_with("kernel-")
            || id.starts_with("tensor-")
            || id.starts_with("src-"))
        {
            out.push_str(&format!("id {id}\n"));
        }
    }
    let count = |s: &str| page.matches(s).count();
    for (what, pat) in [
        ("roofline dots", "<circle class=\"dot\""),
        ("timeline bars", "<rect class=\"span "),
        ("kernel rows", "<tr id=\"kernel-"),
        ("op rows", "<tr id=\"op-"),
        ("tensors drawn", "<li id=\"tensor-"),
        ("source lines", "<tr id=\"src-"),
        ("links", " href=\"#"),
    ] {
        out.push_str(&format!("{what}: {}\n", count(pat)));
    }
    for lane in page.split("class=\"lane ").skip(1) {
        let label = lane.split('>').nth(1).and_then(|s| s.split('<').next());
        out.push_str(&format!("lane {}\n", label.unwrap_or("?")));
    }
    out
}

#[test]
fn a_real_bundle_renders_every_section_with_both_plots() {
    let page = bundle_html("h200-resnet50");
    check_page(&page);
    for id in [
        "summary", "roofline", "timeline", "findings", "tensors", "kernels", "ops", "steps",
    ] {
        assert!(
            page.contains(&format!("<section id=\"{id}\"")),
            "no {id} section"
        );
    }
    assert!(page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot roofline\""));
    assert!(page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot timeline\""));
    assert!(page.contains("<circle class=\"dot\""), "no roofline point");
    assert!(
        page.contains("class=\"span kernel\""),
        "no kernel on the timeline"
    );
    assert!(page.contains("href=\"#op-"), "no link to an op row");
    insta::assert_snapshot!(outline(&page));
}

#[test]
fn a_view_finding_links_its_tensor_in_the_forest() {
    let page = bundle_html("h200-transposed-view-hw");
    check_page(&page);
    assert!(page.contains("<section id=\"tensors\""));
    assert!(
        page.contains("href=\"#tensor-"),
        "no finding links a tensor"
    );
    insta::assert_snapshot!(outline(&page));
}

#[test]
fn every_demo_bundle_renders_a_valid_page() {
    for name in [
        "h200-resnet50",
        "h200-late-migration",
        "h200-launch-bound",
        "h200-fp32-gemm",
        "h200-sync-in-loop",
        "h200-transposed-chain-hw",
    ] {
        let page = bundle_html(name);
        check_page(&page);
        assert!(page.len() < 2_000_000, "{name}: {} bytes", page.len());
    }
}

#[test]
fn a_cpu_only_trace_renders_without_plots() {
    let rel = "real/cpu_only-rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz";
    let bytes = std::fs::read(fixtures().join(rel)).expect("fixture");
    let r = tensight::analyze_bytes(rel, &bytes).expect("reads");
    let page = html::render(&r);
    check_page(&page);
    assert!(page.contains("Not available: no GPU activity in this trace."));
    assert!(!page.contains("class=\"plot timeline\""));
}

/// Names that are markup, in kernels, ops, threads and processes: all shown as text.
#[test]
fn markup_in_kernel_op_and_thread_names_is_escaped() {
    let path = fixtures().join("hostile-html/trace.json");
    let r = tensight::analyze_path(&path).expect("the trace reads");
    let page = html::render(&r);
    check_page(&page);
    for raw in [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<script>document.title",
        "<svg onload",
        "onerror=\"",
    ] {
        assert!(!page.contains(raw), "raw markup in the page: {raw}");
    }
    // Shown as text: in the tables, the findings and the plots' tooltips.
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(page.contains("&lt;&#x2f;svg&gt;&lt;svg onload=document.title="));
    assert_eq!(
        page.matches("<svg").count(),
        2,
        "only the two plots are SVG"
    );
    assert!(page.contains("<title>tensight report: "));
    // The plots themselves: aten::mm on the roofline, the sync and the idle it drained.
    assert_eq!(page.matches("<circle class=\"dot\"").count(), 1);
    assert!(page.contains("<title>aten::mm ×3 (f32): 170.7 FLOP/byte"));
    assert!(page.contains("class=\"span sync\""));
    assert!(page.contains("class=\"span idle-sync\""));
    assert!(page.contains("class=\"span idle-cpu\""));
}

fn comparison(before: &str, after: &str) -> tensight::compare::Comparison {
    let analyse = |rel: &str| {
        tensight::analyze_path(&fixtures().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    tensight::compare::compare(&analyse(before), &analyse(after))
}

/// The text of each cell of each table row (tags as spaces, entities kept), `|` between.
fn rows(page: &str) -> Vec<String> {
    page.split("<tr")
        .skip(1)
        .map(|r| {
            let r = &r[..r.find("</tr>").unwrap_or(r.len())];
            r.split("<td")
                .skip(1)
                .map(|c| {
                    let mut text = String::new();
                    let mut in_tag = true; // the rest of the `<td ...>` tag
                    for ch in c.chars() {
                        match ch {
                            '<' => in_tag = true,
                            '>' if in_tag => {
                                in_tag = false;
                                text.push(' ');
                            }
                            _ if !in_tag => text.push(ch),
                            _ => {}
                        }
                    }
                    let words: Vec<&str> = text.split_whitespace().collect();
                    tensight::text::cut(&words.join(" "), 70)
                })
                .collect::<Vec<_>>()
                .join(" | ")
                .trim_end()
                .to_string()
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// The diff page's outline: sections, chart bars, and every table row's text.
fn diff_outline(page: &str) -> String {
    let mut out = String::new();
    for id in attrs(page, "id") {
        out.push_str(&format!("id {id}\n"));
    }
    for class in ["busy", "idle", "before", "after"] {
        let n = page
            .matches(&format!("<rect class=\"bar {class}\""))
            .count();
        out.push_str(&format!("bars {class}: {n}\n"));
    }
    out.push_str(&format!(
        "marks: {}\n",
        page.matches("<line class=\"mark\"").count()
    ));
    for r in rows(page) {
        out.push_str(&format!("row {r}\n"));
    }
    out
}

/// `tensight diff --format html` of the transposed-view workload and its fix: the
/// planted V001 resolved, the step time change, both charts and the tables.
#[test]
fn the_diff_page_shows_the_planted_view_resolved_and_the_step_faster() {
    let page = html::render_diff(&comparison(
        "bundles/h200-transposed-view-hw",
        "bundles/h200-transposed-view-fixed",
    ));
    check_page(&page);
    for id in ["step", "findings", "kernels", "ops"] {
        assert!(
            page.contains(&format!("<section id=\"{id}\"")),
            "no {id} section"
        );
    }
    assert!(page.contains("<meta name=\"generator\" content=\"tensight"));
    assert!(page.contains("<title>tensight diff: "));
    assert!(page.contains("class=\"plot bars steps\""));
    assert!(page.contains("class=\"plot bars savings\""));
    assert_eq!(page.matches("<svg").count(), 2, "the two charts");
    // The planted finding is resolved; the step is faster, in the table and the verdict.
    let v001 = rows(&page)
        .into_iter()
        .find(|r| r.contains("V001"))
        .expect("a V001 row");
    assert!(
        v001.starts_with("resolved | V001 A transposed view"),
        "{v001}"
    );
    assert!(page.contains("<tr><td>step (trace mean)</td><td class=\"n\">1.75 ms</td><td class=\"n\">1.44 ms</td><td class=\"n\">-307.3 µs</td><td class=\"n\">0.82×</td></tr>"));
    assert!(page.contains("Without the profiler the step is 1.38× faster"));
    // The step chart: GPU busy and idle before and after, the unprofiled step marked.
    assert!(page.contains("<title>before: GPU busy 1.19 ms per step</title>"));
    assert!(page.contains("<title>after: GPU idle 557.4 µs per step</title>"));
    assert!(page.contains("<title>before: step without the profiler 1.32 ms</title>"));
    // The savings chart links each finding to its row.
    assert!(page.contains("<a href=\"#finding-0\"><text"));
    assert!(page.contains("<title>V001 before: saving 262.3 µs (19.8%)</title>"));
    insta::assert_snapshot!(diff_outline(&page));
}

/// Markup in kernel and op names (and in the findings' messages that quote them) is
/// shown as text in the diff page: tables, titles and the charts' tooltips.
#[test]
fn markup_in_names_is_escaped_in_the_diff_page() {
    let c = comparison("hostile-html/trace.json", "hostile-html/trace-faster.json");
    assert!(
        c.kernels.iter().any(|k| k.name.contains("<script>")),
        "the hostile kernels changed"
    );
    assert!(c.ops.iter().any(|o| o.name.contains("<img")));
    let page = html::render_diff(&c);
    check_page(&page);
    for raw in [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<script>document.title",
        "<svg onload",
        "onerror=\"",
    ] {
        assert!(!page.contains(raw), "raw markup in the page: {raw}");
    }
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(page.contains("&lt;&#x2f;svg&gt;&lt;svg onload=document.title="));
    assert_eq!(
        page.matches("<svg").count(),
        2,
        "only the two charts are SVG"
    );
    assert!(page.contains("<title>tensight diff: "));
}
