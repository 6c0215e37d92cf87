//! The HTML report (`--format html`): its structure on a real H200 bundle (sections,
//! both plots, links that land, nothing fetched from the network), an outline snapshot,
//! and a hostile trace whose op, kernel and thread names are markup, rendered escaped.
//! The page in a real browser is tests/python/test_html_report.py.

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
