// pipesim's interactive report: draws the figures held in the page's JSON blocks.
//
// A trace whose meta holds a "pipesim" spec is filled here from a row table before it is
// drawn: "box" traces get one WebGL line segment per row (start, middle, end, then a
// gap), as thick as the row's lane at the current zoom; "point" traces one point per
// row. Every vertex carries the row's hover text, made from the spec's template lines:
// {column}, {column:f3} (3 decimals), {column:ms3} (seconds shown in ms, 3 decimals),
// {column:pct1} (a fraction as a percentage), {column:lookup=list} (a code named by a
// lookup list), {column:row=names} (a row number shown as that row's name), and
// {_duration:f3} (end minus start).
"use strict";
(function () {
  const DTYPES = {
    i1: Int8Array, u1: Uint8Array, i2: Int16Array, u2: Uint16Array,
    i4: Int32Array, u4: Uint32Array, f4: Float32Array, f8: Float64Array,
  };
  const MAX_WIDTH_PX = 400;
  const tables = {};

  function decode(value) {
    if (!value || typeof value !== "object" || !("bdata" in value)) return value;
    const text = atob(value.bdata);
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    return new DTYPES[value.dtype](bytes.buffer);
  }

  function readJson(id) {
    return JSON.parse(document.getElementById(id).textContent);
  }

  function table(id) {
    if (!tables[id]) {
      const raw = readJson(id);
      const columns = {};
      for (const name of Object.keys(raw.columns)) columns[name] = decode(raw.columns[name]);
      tables[id] = { columns: columns, lookups: raw.lookups || {}, length: raw.length };
    }
    return tables[id];
  }

  function compile(lines) {
    const pattern = /\{(\w+)(?::(\w+?)(\d*)(?:=(\w+))?)?\}/g;
    return (lines || []).map(function (line) {
      const parts = [];
      let last = 0;
      line.replace(pattern, function (match, column, format, digits, argument, at) {
        parts.push(line.slice(last, at));
        parts.push({ column: column, format: format || "", digits: Number(digits || 3), argument: argument });
        last = at + match.length;
      });
      parts.push(line.slice(last));
      return parts;
    });
  }

  function show(part, t, row, spec) {
    let value;
    if (part.column === "_duration") {
      value = t.columns[spec.x1][row] - t.columns[spec.x0][row];
    } else {
      value = t.columns[part.column][row];
    }
    if (typeof value === "number" && Number.isNaN(value)) return "-";
    switch (part.format) {
      case "f": return value.toFixed(part.digits);
      case "ms": return (value * 1e3).toFixed(part.digits);
      case "pct": return (value * 100).toFixed(part.digits) + "%";
      case "lookup": return t.lookups[part.argument][value];
      case "row": return value < 0 ? "" : String(t.columns[part.argument][value]);
      default: return String(value);
    }
  }

  function hoverText(template, t, row, spec) {
    return template.map(function (parts) {
      return parts.map(function (part) {
        return typeof part === "string" ? part : show(part, t, row, spec);
      }).join("");
    }).join("<br>");
  }

  function fill(trace) {
    const spec = trace.meta && trace.meta.pipesim;
    if (!spec) return;
    const t = table(spec.table);
    const rows = spec.rows === undefined ? null : decode(spec.rows);
    const count = rows ? rows.length : t.length;
    const template = compile(spec.hover);
    const scale = spec.scale || 1;
    const box = spec.shape === "box";
    const per = box ? 4 : 1;
    const x = new Float64Array(count * per);
    const y = new Float64Array(count * per);
    const text = new Array(count * per);
    for (let k = 0; k < count; k++) {
      const row = rows ? rows[k] : k;
      const label = hoverText(template, t, row, spec);
      if (box) {
        // each end drawn a little inside, so that boxes side by side stay apart
        const start = t.columns[spec.x0][row] * scale;
        const end = t.columns[spec.x1][row] * scale;
        const inset = (end - start) * (spec.inset || 0);
        const lane = t.columns[spec.y][row] + spec.offset;
        x.set([start + inset, (start + end) / 2, end - inset, NaN], 4 * k);
        y.set([lane, lane, lane, NaN], 4 * k);
        text[4 * k] = text[4 * k + 1] = text[4 * k + 2] = label;
        text[4 * k + 3] = null;
      } else {
        x[k] = t.columns[spec.x][row] * scale;
        y[k] = t.columns[spec.y][row] * (spec.yscale || 1);
        text[k] = label;
      }
    }
    trace.x = x;
    trace.y = y;
    trace.text = text;
    trace.hovertemplate = "%{text}<extra></extra>";
  }

  function axisKey(trace) {
    const axis = trace.yaxis || "y";
    return "yaxis" + axis.slice(1);
  }

  // The px per y unit of an axis before drawing, from the layout the figure was given.
  function plannedPx(layout, key) {
    const axis = layout[key] || {};
    const margin = layout.margin || {};
    const domain = axis.domain || [0, 1];
    const range = axis.range || [0, 1];
    const inner = (layout.height || 450) - (margin.t || 0) - (margin.b || 0);
    return inner * (domain[1] - domain[0]) / Math.abs(range[1] - range[0]);
  }

  function boxWidth(spec, pxPerUnit) {
    return Math.max(1, Math.min(MAX_WIDTH_PX, spec.thickness * pxPerUnit));
  }

  function plannedWidths(figure) {
    figure.data.forEach(function (trace) {
      const spec = trace.meta && trace.meta.pipesim;
      if (spec && spec.shape === "box") {
        trace.line = Object.assign({}, trace.line, {
          width: boxWidth(spec, plannedPx(figure.layout, axisKey(trace))),
        });
      }
    });
  }

  // After a zoom, boxes keep the height of their lane.
  function fitWidths(gd) {
    const widths = [];
    const indices = [];
    gd.data.forEach(function (trace, index) {
      const spec = trace.meta && trace.meta.pipesim;
      if (!spec || spec.shape !== "box") return;
      const axis = gd._fullLayout[axisKey(trace)];
      const width = boxWidth(spec, axis._length / Math.abs(axis.range[1] - axis.range[0]));
      if (Math.abs(width - trace.line.width) > 0.25) {
        widths.push(width);
        indices.push(index);
      }
    });
    if (indices.length) Plotly.restyle(gd, { "line.width": widths }, indices);
  }

  const linking = { busy: false };

  function linkTime(gd, event) {
    const group = gd.dataset.link;
    if (!group || linking.busy) return;
    // a zoom in any subplot of the figure: its x axis, whatever its number
    const update = {};
    for (const key of Object.keys(event)) {
      const match = /^(xaxis\d*)\.(range\[0\]|range|autorange)$/.exec(key);
      if (!match) continue;
      if (match[2] === "range[0]") {
        update["xaxis.range"] = [event[key], event[match[1] + ".range[1]"]];
      } else if (match[2] === "range") {
        update["xaxis.range"] = event[key];
      } else if (event[key]) {
        update["xaxis.autorange"] = true;
      }
      break;
    }
    if (!Object.keys(update).length) return;
    linking.busy = true;
    const others = document.querySelectorAll('.figure[data-link="' + group + '"]');
    const done = [];
    others.forEach(function (other) {
      if (other !== gd) done.push(Plotly.relayout(other, update));
    });
    Promise.all(done).finally(function () { linking.busy = false; });
  }

  function draw(block) {
    const figure = JSON.parse(block.textContent);
    const gd = document.getElementById(block.dataset.target);
    figure.data.forEach(fill);
    plannedWidths(figure);
    return Plotly.newPlot(gd, figure.data, figure.layout, figure.config).then(function () {
      fitWidths(gd);
      gd.on("plotly_relayout", function (event) {
        fitWidths(gd);
        linkTime(gd, event);
      });
    });
  }

  function cellValue(cell) {
    const value = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent;
    const number = Number(value);
    return value !== "" && !Number.isNaN(number) ? number : value.toLowerCase();
  }

  // A click on a header sorts the table by that column; a second click reverses it.
  function sortable(tableElement) {
    const headers = tableElement.querySelectorAll("thead th");
    headers.forEach(function (header, column) {
      header.addEventListener("click", function () {
        const ascending = header.getAttribute("aria-sort") !== "ascending";
        headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
        header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        const body = tableElement.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const left = cellValue(a.cells[column]);
          const right = cellValue(b.cells[column]);
          const order = left < right ? -1 : left > right ? 1 : 0;
          return ascending ? order : -order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }

  document.querySelectorAll("table.sortable").forEach(sortable);
  const drawn = Array.from(document.querySelectorAll("script.pipesim-figure")).map(draw);
  Promise.all(drawn).then(function () {
    document.body.dataset.ready = "true";
  }, function (error) {
    document.body.dataset.ready = "failed";
    throw error;
  });
})();
