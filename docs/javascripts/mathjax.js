// MathJax for pymdownx.arithmatex (generic: true), which wraps each formula in an
// element of class "arithmatex", inline as \( ... \), displayed as \[ ... \].
// Only those elements are typeset: a "$" or "\(" elsewhere in a page stays text.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

// mkdocs-material loads pages without a full reload (document$ emits on each), so
// typeset again whenever the content changes.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (!window.MathJax.typesetPromise) return;  // the first page: MathJax typesets it
    MathJax.startup.output.clearCache();
    MathJax.typesetClear();
    MathJax.texReset();
    MathJax.typesetPromise();
  });
}
