// Lesson pages: a click on a figure opens it alone, where a phone can zoom into it (the
// figures are SVG, sharp at any zoom). Everything else on the page is static.
(function () {
  "use strict";
  function link() {
    for (const img of document.querySelectorAll("div.cell_output img")) {
      const src = img.getAttribute("src") || "";
      // the ring animation's player swaps its frames (data: URIs) in one <img>: not a file
      if (img.closest("a") || src.startsWith("data:") || img.dataset.ringsim) continue;
      const a = document.createElement("a");
      a.href = src;
      a.className = "rs-figure-link";
      a.title = "open the figure alone";
      img.replaceWith(a);
      a.appendChild(img);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", link);
  else link();
})();
