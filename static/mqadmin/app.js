/* mqadmin: the little behaviour the pages need, without inline scripts (CSP) or frameworks.
 *
 * - Polling fragments (class "poll") skip their request while the tab is hidden and
 *   refresh at once when it becomes visible again ("mq:visible" on <body>); they also
 *   skip it while one of their forms is being filled in (open, focused or changed).
 * - Lock-expiry countdowns (<time class="countdown" data-until="epoch ms">) tick every second.
 * - "Select all" checkboxes, a live count of selected rows, and buttons that need a selection.
 * - Buttons with data-confirm ask before submitting their form.
 * - "/" focuses the job id lookup box.
 * - Changing the explorer's store reloads the whole page (names, queues and headings change).
 * - "Expand flow" toggles: a second click collapses the nested flow instead of reloading it.
 * - Focus survives htmx swaps (live refreshes, Next/Previous, Apply): the element that had
 *   it is found again in the new content (by id, rel, href, or name and value), else the
 *   swapped region itself takes focus, so a keyboard user never falls back to the top.
 * - Disclosures (<details>) keep the state the reader gave them across those swaps.
 * - "Live" checkboxes (data-refresh) reload their region every few seconds.
 * - "Show local time" switches absolute times (<time class="abs">) to the browser's zone.
 * - Table cells get their column's heading as data-label (phones show rows as labelled cards).
 * - Live pages (hx-ext="sse" sse-connect, htmx's SSE extension): while the event stream is
 *   live (its "ready" event came, no error since) the regions inside it skip their timed
 *   polls and refresh on the stream's events instead; when it fails they poll as before.
 *   The stream position is kept in the sse-connect URL, so a reconnect resumes there.
 *   The job page's log list gets its new lines appended (once each).
 * - The explorer disables orders and states that cannot go together (an order other than
 *   enqueued time reads only the sets of its states), before the form is submitted.
 * Everything uses event delegation, so content swapped in by htmx works without re-binding.
 */
(function () {
  "use strict";

  // A form of a polling region whose disclosure is open, or with a field that has focus
  // or a changed value, is being filled in (the overview's "Set limits" form): a refresh
  // would replace it, typing and all.
  // Whether a select's choice differs from the one it loaded with.  A single select whose
  // options carry no `selected` attribute starts on its first enabled option: that one
  // counts as its default, not as a change.
  function selectChanged(field) {
    var options = field.options;
    var marked = false;
    var first = -1;
    for (var i = 0; i < options.length; i += 1) {
      if (options[i].defaultSelected) { marked = true; }
      if (first < 0 && !options[i].disabled) { first = i; }
    }
    for (var j = 0; j < options.length; j += 1) {
      var initial = marked || field.multiple ? options[j].defaultSelected : j === first;
      if (options[j].selected !== initial) { return true; }
    }
    return false;
  }

  function beingEdited(region) {
    if (region.querySelector("details.verb-form[open]")) { return true; }
    var fields = region.querySelectorAll("form input:not([type=hidden]), form select, form textarea");
    for (var i = 0; i < fields.length; i += 1) {
      var field = fields[i];
      if (field === document.activeElement) { return true; }
      if (field.tagName.toLowerCase() === "select") {
        if (selectChanged(field)) { return true; }
      } else if (field.type === "checkbox" || field.type === "radio") {
        if (field.checked !== field.defaultChecked) { return true; }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var source = event.detail && event.detail.elt;
    if (!source || !source.classList) { return; }
    if (source.classList.contains("poll") && (document.hidden || beingEdited(source))) {
      event.preventDefault();
    }
    var config = event.detail.requestConfig;
    var trigger = (config && config.triggeringEvent && config.triggeringEvent.type) || "";
    // A timed poll (it has no triggering event) is not needed while the stream is live,
    // except now and then (data-live-every, ms) for what changes without an event: ages,
    // a lock's renewed expiry, live workers.
    if (!trigger && source.classList.contains("poll") && liveStream(source)) {
      var every = parseInt(source.getAttribute("data-live-every") || "0", 10);
      var key = source.id || "";
      var now = Date.now();
      if (slowPolls[key] === undefined) { slowPolls[key] = now; }
      if (every && key && now - slowPolls[key] >= every) {
        slowPolls[key] = now;
      } else {
        event.preventDefault();
      }
    }
    // Refreshes pushed by the stream (or on coming back to the tab) wait for a visible tab,
    // skip a region being filled in, and follow the region's "Live" box when it has one.
    if (trigger.indexOf("sse:") === 0 || trigger === "mq:visible") {
      var box = source.hasAttribute("data-live-when") && document.querySelector(source.getAttribute("data-live-when"));
      if (document.hidden || beingEdited(source) || (box && !box.checked)) {
        event.preventDefault();
      }
    }
    if (source.classList.contains("nested-toggle")) {
      var box = document.getElementById(source.getAttribute("aria-controls"));
      if (box && box.childElementCount) {
        event.preventDefault();
        box.replaceChildren();
        source.textContent = "Expand flow";
        source.setAttribute("aria-expanded", "false");
      }
    }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    var box = event.detail && event.detail.target;
    if (box && box.classList && box.classList.contains("nested") && box.id) {
      var toggle = document.querySelector('[aria-controls="' + box.id + '"]');
      if (toggle) {
        toggle.textContent = "Collapse flow";
        toggle.setAttribute("aria-expanded", "true");
      }
    }
  });

  // -------------------------------------------------------------- live refresh
  // A ticked <input data-refresh="#region" data-every="ms"> asks its region to reload
  // itself (htmx "mq:refresh") every interval while the tab is visible, unless the
  // region is fed by a live event stream.
  setInterval(function () {
    if (document.hidden || !window.htmx) { return; }
    document.querySelectorAll("input[data-refresh]:checked").forEach(function (box) {
      var every = parseInt(box.getAttribute("data-every"), 10) || 5000;
      var last = parseInt(box.getAttribute("data-last") || "0", 10);
      var now = Date.now();
      if (now - last < every) { return; }
      box.setAttribute("data-last", String(now));
      var region = document.querySelector(box.getAttribute("data-refresh"));
      if (region && !liveStream(region)) { window.htmx.trigger(region, "mq:refresh"); }
    });
  }, 1000);

  // -------------------------------------------------------------- event stream
  // The element with sse-connect carries data-stream="live" from the stream's "ready"
  // event until the stream errors or closes (the browser then reconnects by itself, or
  // htmx does after a refusal such as a 503: polling covers the gap).
  var STREAM_EVENTS = ["ready", "jobs", "state", "progress", "log"];

  var slowPolls = {};

  function liveStream(el) {
    var source = el.closest && el.closest("[sse-connect]");
    return source && source.getAttribute("data-stream") === "live" ? source : null;
  }

  // A status line sits in the page's heading, outside the stream's element.
  function liveTexts() {
    var page = document.querySelector("[sse-connect]");
    var pageLive = !!page && page.getAttribute("data-stream") === "live";
    document.querySelectorAll(".live-status[data-live]").forEach(function (status) {
      var live = status.closest("[sse-connect]") ? !!liveStream(status) : pageLive;
      var text = status.getAttribute(live ? "data-live" : "data-polling");
      if (status.textContent !== text) { status.textContent = text; }
    });
  }

  // Keep the last position in the URL: a stream htmx opens again (after a refusal)
  // resumes there instead of at the page's render.
  function remember(source, message) {
    if (!message.lastEventId) { return; }
    var url = new URL(source.getAttribute("sse-connect"), window.location.href);
    url.searchParams.set("after", message.lastEventId);
    source.setAttribute("sse-connect", url.pathname + url.search);
  }

  document.addEventListener("htmx:sseOpen", function (event) {
    var source = event.target;
    var stream = event.detail && event.detail.source;
    if (!stream || stream.mqWatched) { return; }
    stream.mqWatched = true;
    STREAM_EVENTS.forEach(function (name) {
      stream.addEventListener(name, function (message) {
        remember(source, message);
        if (name === "ready") {
          source.setAttribute("data-stream", "live");
          liveTexts();
        }
      });
    });
  });

  function streamDown(event) {
    var source = event.target;
    if (source && source.hasAttribute && source.hasAttribute("sse-connect")) {
      source.removeAttribute("data-stream");
      liveTexts();
    }
  }
  document.addEventListener("htmx:sseError", streamDown);
  document.addEventListener("htmx:sseClose", streamDown);

  // Live log lines: never shown twice (a line written between the page's render and its
  // subscription comes both ways), at most as many as the store keeps, and the
  // "no lines yet" note goes once there are some.
  var LOG_LINES_KEPT = 1000;

  function tidyLog() {
    var list = document.getElementById("job-log-lines");
    if (!list) { return; }
    var seen = {};
    Array.prototype.slice.call(list.children).forEach(function (line) {
      var key = line.getAttribute("data-at") + "\u0000" + line.textContent;
      if (seen[key]) { line.remove(); } else { seen[key] = true; }
    });
    while (list.children.length > LOG_LINES_KEPT) { list.firstElementChild.remove(); }
    var section = list.closest("section");
    var empty = section && section.querySelector(".log-empty");
    if (empty) { empty.hidden = list.children.length > 0; }
  }
  document.addEventListener("htmx:sseMessage", tidyLog);

  // -------------------------------------------------------------- local times
  // <time class="abs" data-utc="..."> show UTC; the "show local time" toggle switches every
  // one of them to the browser's time zone (remembered for the next page).
  var LOCAL_KEY = "mqadmin.localTimes";
  function localTimes() {
    var on = false;
    try { on = window.localStorage.getItem(LOCAL_KEY) === "1"; } catch (e) { on = false; }
    document.querySelectorAll("time.abs[datetime]").forEach(function (el) {
      if (on) {
        var d = new Date(el.getAttribute("datetime"));
        el.textContent = d.toLocaleString(undefined, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
      } else {
        el.textContent = el.getAttribute("data-utc");
      }
    });
    document.querySelectorAll(".time-zone-toggle").forEach(function (button) {
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.textContent = on ? "show UTC" : "show local time";
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest(".time-zone-toggle");
    if (!button) { return; }
    try {
      var on = window.localStorage.getItem(LOCAL_KEY) === "1";
      window.localStorage.setItem(LOCAL_KEY, on ? "0" : "1");
    } catch (e) { return; }
    localTimes();
  });

  // -------------------------------------------------------- disclosures across swaps
  // A disclosure (<details>) the reader opened or closed keeps that state when its region
  // is refreshed (the overview's chart numbers every minute, a running job's attempts
  // every few seconds): it is found again by id, else by its summary's text (the n-th of
  // that text), and given the state it had.  Disclosures new to the region keep the
  // server's default.
  // (Per region id: two regions may be swapped at once, e.g. on "mq:visible".)
  var pendingDisclosures = {};

  function disclosureKeys(region) {
    var keys = [];
    var seen = {};
    var all = region.querySelectorAll("details");
    for (var i = 0; i < all.length; i += 1) {
      var d = all[i];
      var key = null;
      if (d.id) {
        key = "#" + d.id;
      } else {
        var summary = d.querySelector(":scope > summary");
        if (summary) {
          var text = summary.textContent.replace(/\s+/g, " ").trim();
          seen[text] = (seen[text] || 0) + 1;
          key = seen[text] + "\u0000" + text;
        }
      }
      if (key !== null) { keys.push({ key: key, el: d }); }
    }
    return keys;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!target || !target.id || !target.querySelectorAll) { return; }
    var states = {};
    var any = false;
    disclosureKeys(target).forEach(function (entry) {
      states[entry.key] = entry.el.open;
      any = true;
    });
    if (any) { pendingDisclosures[target.id] = states; } else { delete pendingDisclosures[target.id]; }
  });

  // On htmx:afterSwap, in the same task as the swap: no click can come in between.
  document.addEventListener("htmx:afterSwap", function (event) {
    var region = event.target;
    if (!region || !region.id || !Object.prototype.hasOwnProperty.call(pendingDisclosures, region.id)) { return; }
    var states = pendingDisclosures[region.id];
    delete pendingDisclosures[region.id];
    disclosureKeys(region).forEach(function (entry) {
      if (Object.prototype.hasOwnProperty.call(states, entry.key)) { entry.el.open = states[entry.key]; }
    });
  });

  // -------------------------------------------------------------- focus across swaps
  var pendingFocus = null;

  function attr(name, value) { return "[" + name + '="' + CSS.escape(value) + '"]'; }

  function focusKey(el) {
    if (el.id) { return { selector: "#" + CSS.escape(el.id) }; }
    var tag = el.tagName.toLowerCase();
    if (tag === "a") {
      var rel = el.getAttribute("rel");
      if (rel) { return { selector: "a" + attr("rel", rel) }; }
      if (el.getAttribute("href")) { return { selector: "a" + attr("href", el.getAttribute("href")) }; }
    }
    if ((tag === "input" || tag === "select" || tag === "button") && el.name) {
      var sel = tag + attr("name", el.name);
      if (tag !== "select" && el.value) { sel += attr("value", el.value); }
      return { selector: sel };
    }
    if (tag === "button") { return { selector: "button", text: el.textContent.trim() }; }
    if (tag === "summary" && el.parentElement && el.parentElement.id) {
      return { selector: "#" + CSS.escape(el.parentElement.id) + " > summary" };
    }
    if (tag === "summary") { return { selector: "summary", text: el.textContent.trim() }; }
    return null;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    var active = document.activeElement;
    if (!target || !active || active === document.body || !target.contains(active)) { return; }
    var key = focusKey(active);
    pendingFocus = { key: key, region: target.id || null };
  });

  document.addEventListener("htmx:afterSettle", function () {
    if (!pendingFocus) { return; }
    var pending = pendingFocus;
    pendingFocus = null;
    var found = null;
    if (pending.key) {
      var scope = (pending.region && document.getElementById(pending.region)) || document;
      var candidates = scope.querySelectorAll(pending.key.selector);
      for (var i = 0; i < candidates.length && !found; i += 1) {
        if (!pending.key.text || candidates[i].textContent.trim() === pending.key.text) { found = candidates[i]; }
      }
    }
    if (!found && pending.region) {
      found = document.getElementById(pending.region);
      if (found && !found.hasAttribute("tabindex")) { found.setAttribute("tabindex", "-1"); }
    }
    if (found && typeof found.focus === "function") { found.focus({ preventScroll: true }); }
  });

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && document.body) {
      document.body.dispatchEvent(new CustomEvent("mq:visible"));
    }
  });

  function words(ms) {
    var abs = Math.abs(ms);
    var s = Math.floor(abs / 1000);
    var text;
    if (s < 60) { text = s + " s"; }
    else if (s < 3600) { text = Math.floor(s / 60) + " min " + (s % 60) + " s"; }
    else { text = Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min"; }
    return ms >= 0 ? "in " + text : "expired " + text + " ago";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time.countdown[data-until]").forEach(function (el) {
      var until = parseInt(el.getAttribute("data-until"), 10);
      if (!isNaN(until)) {
        el.textContent = words(until - now);
        el.classList.toggle("expired", until < now);
      }
    });
  }
  setInterval(tick, 1000);

  function selectionState(root) {
    document.querySelectorAll("[data-needs-selection]").forEach(function (button) {
      var boxes = document.querySelectorAll(button.getAttribute("data-needs-selection"));
      var checked = 0;
      boxes.forEach(function (box) { if (box.checked) { checked += 1; } });
      button.disabled = checked === 0;
      var form = button.closest("form");
      var counter = form && form.querySelector(".selected-count");
      if (counter) { counter.textContent = checked ? checked + " selected" : "none selected"; }
    });
  }

  // Orders with data-states list the only states they can serve; ticking another state
  // disables them, and choosing one disables the other states' boxes.
  function orderConstraints() {
    var select = document.getElementById("f-order-by");
    if (!select || !select.form) { return; }
    var boxes = Array.prototype.slice.call(select.form.querySelectorAll("input[name=state]"));
    var ticked = boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; });
    function fits(option) {
      var allowed = option.getAttribute("data-states");
      if (!allowed) { return true; }
      var list = allowed.split(" ");
      var ok = ticked.length > 0 && ticked.every(function (s) { return list.indexOf(s) >= 0; });
      return option.hasAttribute("data-single-state") ? ok && ticked.length === 1 : ok;
    }
    Array.prototype.forEach.call(select.options, function (option) {
      option.disabled = !fits(option) && !option.selected;
    });
    var chosen = select.options[select.selectedIndex];
    var only = chosen && chosen.getAttribute("data-states");
    var single = chosen && chosen.hasAttribute("data-single-state");
    boxes.forEach(function (box) {
      var blocked = false;
      if (only) {
        blocked = only.split(" ").indexOf(box.value) < 0;
        if (single && ticked.length && ticked.indexOf(box.value) < 0) { blocked = true; }
      }
      box.disabled = blocked && !box.checked;
      var label = box.closest("label");
      if (label) { label.classList.toggle("disabled", box.disabled); }
      if (box.disabled) {
        box.setAttribute("title", "Not served with the chosen order");
      } else {
        box.removeAttribute("title");
      }
    });
    var note = document.getElementById("order-conflict");
    var conflict = !!chosen && !fits(chosen);
    if (note) { note.hidden = !conflict; }
    var apply = select.form.querySelector("button[type=submit]");
    if (apply) { apply.disabled = !!conflict; }
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("#filters input[name=state], #f-order-by")) {
      orderConstraints();
    }
    if (target.matches && target.matches("input.select-all[data-select]")) {
      document.querySelectorAll(target.getAttribute("data-select")).forEach(function (box) {
        box.checked = target.checked;
      });
      // A whole page ticked: offer every job of the filter (through the bulk preview).
      document.querySelectorAll(".select-all-matching").forEach(function (note) {
        note.hidden = !target.checked;
      });
    }
    if (target.matches && target.matches("input[type=checkbox]")) { selectionState(); }
    // Another store means other names, queues and headings: load the whole page for it
    // (a native submit, not the form's htmx swap of the results).
    if (target.matches && target.matches("select[data-full-reload]") && target.form) {
      target.form.submit();
    }
  });

  document.addEventListener("click", function (event) {
    var verbLink = event.target.closest && event.target.closest("a[data-verb-from]");
    if (verbLink) {
      var chooser = document.querySelector(verbLink.getAttribute("data-verb-from"));
      if (chooser && chooser.value) {
        event.preventDefault();
        window.location.href = verbLink.getAttribute("href") + "&verb=" + encodeURIComponent(chooser.value);
        return;
      }
    }
    var button = event.target.closest && event.target.closest("[data-confirm]");
    if (button && !window.confirm(button.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) { return; }
    var active = document.activeElement;
    if (active && (active.tagName === "INPUT" || active.tagName === "TEXTAREA" || active.tagName === "SELECT")) { return; }
    var box = document.getElementById("lookup-id");
    if (box) { event.preventDefault(); box.focus(); }
  });

  // Each body cell gets the text of its column's heading (colspans counted).
  function labelCells() {
    document.querySelectorAll("main table").forEach(function (table) {
      var head = table.tHead && table.tHead.rows[0];
      if (!head) { return; }
      var labels = [];
      Array.prototype.forEach.call(head.cells, function (cell) {
        var text = cell.textContent.replace(/\s+/g, " ").trim();
        for (var i = 0; i < (cell.colSpan || 1); i += 1) { labels.push(text); }
      });
      Array.prototype.forEach.call(table.tBodies, function (body) {
        Array.prototype.forEach.call(body.rows, function (row) {
          var col = 0;
          Array.prototype.forEach.call(row.cells, function (cell) {
            if (!cell.hasAttribute("data-label") && (cell.colSpan || 1) === 1) {
              cell.setAttribute("data-label", labels[col] || "");
            }
            col += cell.colSpan || 1;
          });
        });
      });
    });
  }

  // Copy buttons (ids, payloads): the text of data-copy to the clipboard.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      button.classList.add("copied");
      setTimeout(function () { button.classList.remove("copied"); }, 1200);
    });
  });

  // Sortable tables (a page that holds all its rows): each heading becomes a button; a
  // cell's data-sort (else its text, numbers read as numbers) is the key; the choice
  // survives live refreshes of the table (remembered by the table's data-sortable name).
  var sortChoice = {};
  function sortKey(cell) {
    if (!cell) { return ""; }
    var raw = cell.getAttribute("data-sort");
    if (raw === null) { raw = cell.textContent.replace(/\s+/g, " ").trim(); }
    var plain = raw.replace(/,/g, "");
    if (/^-?\d+(\.\d+)?$/.test(plain)) { return parseFloat(plain); }
    return raw.toLowerCase();
  }
  function sortTable(table, index, ascending) {
    var head = table.tHead.rows[0];
    Array.prototype.forEach.call(head.cells, function (c, i) {
      if (i === index) { c.setAttribute("aria-sort", ascending ? "ascending" : "descending"); }
      else { c.removeAttribute("aria-sort"); }
    });
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = sortKey(a.cells[index]), y = sortKey(b.cells[index]);
        if (typeof x !== typeof y) { x = String(x); y = String(y); }
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  }
  function makeSortable() {
    document.querySelectorAll("table[data-sortable]").forEach(function (table) {
      var head = table.tHead && table.tHead.rows[0];
      if (!head || table.hasAttribute("data-sort-ready")) { return; }
      table.setAttribute("data-sort-ready", "");
      var name = table.getAttribute("data-sortable");
      Array.prototype.forEach.call(head.cells, function (th, index) {
        if (th.hasAttribute("data-nosort") || !th.textContent.trim() || th.querySelector(".visually-hidden")) { return; }
        var button = document.createElement("button");
        button.type = "button";
        button.className = "sort";
        while (th.firstChild) { button.appendChild(th.firstChild); }
        th.appendChild(button);
        button.addEventListener("click", function () {
          var ascending = th.getAttribute("aria-sort") !== "ascending";
          sortChoice[name] = [index, ascending];
          sortTable(table, index, ascending);
        });
      });
      if (sortChoice[name]) { sortTable(table, sortChoice[name][0], sortChoice[name][1]); }
    });
  }

  // Phones: a filter panel marked data-narrow-closed starts folded (unless it shows an error).
  function foldNarrowPanels() {
    if (!window.matchMedia || !window.matchMedia("(max-width: 640px)").matches) { return; }
    document.querySelectorAll("details[data-narrow-closed]").forEach(function (panel) {
      if (!panel.querySelector(".field-error:not([hidden])")) { panel.open = false; }
    });
  }

  document.addEventListener("DOMContentLoaded", function () { foldNarrowPanels(); makeSortable(); tick(); selectionState(); orderConstraints(); labelCells(); localTimes(); });
  document.addEventListener("htmx:afterSettle", function () { makeSortable(); tick(); selectionState(); labelCells(); localTimes(); liveTexts(); tidyLog(); });
})();
