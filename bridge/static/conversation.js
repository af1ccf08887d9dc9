// The conversation as the page shows it: one line per turn, the cut of a reply that the
// person spoke (or typed) over, marked where it stopped, and a reply the service held.

const $ = (id) => document.getElementById(id);
const BARGE_SHOWN_MS = 2500;
const WHO = { you: "you", assistant: "assistant", error: "error" };

function line(id) {
  return id ? document.querySelector(`#transcript p[data-id="${CSS.escape(id)}"]`) : null;
}

// Adds a line, or returns the one this id already has (a replay after a resume repeats some).
export function addLine(who, id, text, kind = "") {
  let p = line(id);
  if (!p) {
    p = document.createElement("p");
    p.className = `line ${who} ${kind}`.trim();
    if (id) p.dataset.id = id;
    const name = document.createElement("b");
    name.textContent = WHO[who];
    const words = document.createElement("span");
    words.className = "words";
    p.append(name, " ", words);
    $("transcript").append(p);
  }
  if (text) p.querySelector(".words").textContent = text;
  $("transcript").scrollTop = $("transcript").scrollHeight; // the newest turn in view
  return p;
}

export function setLine(id, text) {
  const p = line(id);
  if (p) p.querySelector(".words").textContent = text;
}

// Marks a reply that was cut, and where: how much of it was heard.
export function markCut(id, playedMs) {
  const p = line(id);
  if (!p || p.classList.contains("cut")) return;
  p.classList.add("cut");
  const note = document.createElement("em");
  note.className = "note";
  note.textContent = `cut at ${(playedMs / 1000).toFixed(1)} s`;
  p.append(" ", note);
}

// Shows that the service held a reply for speech over it, and whether it went on.
export function markOverlap(id, decision) {
  const p = line(id);
  if (!p) return;
  let note = p.querySelector(".overlap");
  if (!note) {
    note = document.createElement("em");
    note.className = "overlap";
    p.append(" ", note);
  }
  const at = `${(decision.audio_ms / 1000).toFixed(1)} s`;
  note.textContent = decision.action === "pause" ? `paused at ${at}` : `paused, resumed at ${at}`;
  p.dataset.overlap = decision.action;
}

let bargeTimer = 0;

// Lights the barge-in badge for a moment.
export function showBargeIn(count) {
  const badge = $("barge");
  badge.textContent = count > 1 ? `barge-in ×${count}` : "barge-in";
  badge.classList.add("on");
  clearTimeout(bargeTimer);
  bargeTimer = setTimeout(() => badge.classList.remove("on"), BARGE_SHOWN_MS);
}
