// Each turn's latency: a row of the table, and a bar chart of the recent turns (inline SVG,
// drawn with DOM calls: the page's CSP allows no inline style or script, and needs none).

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const TURNS_CHARTED = 8;
// What the chart shows of a turn: [the turn's field, its label, its CSS class].
const SERIES = [
  ["clientLatencyMs", "end of speech or typing → first audio", "page"],
  ["serverLatencyMs", "service: from the turn's commit to its first audio", "server"],
  ["firstTextMs", "service: from the turn's commit to its first text", "text"],
];
const ROW_H = 14; // one bar
const GROUP_GAP = 10; // between turns
const LABEL_W = 74; // the turn's name on the left
const VALUE_W = 64; // room for the last bar's figure on the right

const charted = []; // [name, turn] of the turns drawn, oldest first

function ms(value) {
  return value === null || value === undefined ? "–" : `${Math.round(value)} ms`;
}

// The turn-end cell: the wait chosen, and when the judgement that chose it came (the judging
// is time the user waits too: a 200 ms wait decided 1.1 s after the speech ended is 1.1 s).
export function turnEnd(r) {
  if (r.turnWaitMs === null || r.turnWaitMs === undefined) return "–";
  if (r.turnDecidedMs === null || r.turnDecidedMs === undefined) return ms(r.turnWaitMs);
  return `${ms(r.turnWaitMs)}, decided ${ms(r.turnDecidedMs)} after speech`;
}

function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// The turn's row in the table, and its bars in the chart; shown again, the row is replaced (a
// call's answer may start on its track after the service finished it).
export function showTurn(id, r) {
  const name = id.slice(-8);
  const row = document.createElement("tr");
  row.dataset.id = id;
  const heard = r.status === "cancelled" || r.cutOnTrack ? `${ms(r.playedMs)} heard`
              : ms(r.audioMs);
  for (const value of [name, r.status, heard, ms(r.clientLatencyMs), ms(r.serverLatencyMs),
                       ms(r.firstTextMs), turnEnd(r)]) {
    const cell = document.createElement("td");
    cell.textContent = value;
    row.append(cell);
  }
  const shown = document.querySelector(`#turns tr[data-id="${CSS.escape(id)}"]`);
  if (shown) shown.replaceWith(row);
  else $("turns").append(row);
  if (SERIES.some(([field]) => r[field] !== null)) {
    if (!charted.some(([, turn]) => turn === r)) charted.push([name, r]);
    if (charted.length > TURNS_CHARTED) charted.shift();
    drawChart();
  }
}

function drawChart() {
  $("chart-box").hidden = false; // first, so that the chart has a width to measure
  const chart = $("chart");
  const width = chart.clientWidth || 600;
  const groupH = SERIES.length * ROW_H + GROUP_GAP;
  const height = charted.length * groupH + 8;
  const longest = Math.max(1, ...charted.flatMap(([, r]) => SERIES.map(([f]) => r[f] || 0)));
  const scale = (width - LABEL_W - VALUE_W) / longest;
  chart.replaceChildren();
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  chart.setAttribute("height", String(height));
  charted.forEach(([name, r], turn) => {
    const top = turn * groupH + 4;
    chart.append(svg("text", { x: 0, y: top + ROW_H * 1.5 + 4, class: "turn" }, name));
    SERIES.forEach(([field, label, kind], index) => {
      const value = r[field];
      if (value === null) return;
      const y = top + index * ROW_H;
      const w = Math.max(1, value * scale);
      const bar = svg("rect", { x: LABEL_W, y, width: w, height: ROW_H - 3, rx: 2, class: kind });
      bar.append(svg("title", {}, `${label}: ${Math.round(value)} ms`));
      chart.append(bar, svg("text", { x: LABEL_W + w + 4, y: y + ROW_H - 4, class: "value" },
                            `${Math.round(value)} ms`));
    });
  });
}
