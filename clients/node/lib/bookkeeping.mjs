// What makes a resume exact, with no I/O: the commands the server has not confirmed, and the
// cursor of the last journaled event received.
//
// Outbound, every command that changes the session gets the next client_seq and is kept until
// an event reports (applied_client_seq) that the server applied it; after a resume exactly the
// commands above the server's number go out again, with their original numbers, so each is
// applied once whatever the connection lost. Inbound, the cursor is where a resume asks the
// replay to start, and it drops the duplicates a replay may bring.

export class CommandJournal {
  #entries = []; // requests in client_seq order, contiguous from the oldest
  #nextSeq = 1;

  get length() {
    return this.#entries.length;
  }

  /** The client_seq of the newest command numbered so far (0 before the first). */
  get lastSeq() {
    return this.#nextSeq - 1;
  }

  /** Gives `request` the next client_seq, keeps it and returns it. */
  number(request) {
    request.client_seq = this.#nextSeq++;
    this.#entries.push(request);
    return request;
  }

  /** Forgets every command the server applied (client_seq <= applied); returns how many. */
  trim(applied) {
    exact(applied, "applied_client_seq");
    let removed = 0;
    while (this.#entries.length > 0 && this.#entries[0].client_seq <= applied) {
      this.#entries.shift();
      removed += 1;
    }
    return removed;
  }

  /** The commands to send again to a server that applied up to `applied`. */
  pendingAfter(applied) {
    if (applied > this.lastSeq) {
      throw new ProtocolViolation(
        `the server applied client_seq ${applied}, ` +
          `beyond the newest command sent (${this.lastSeq})`,
      );
    }
    this.trim(applied);
    return [...this.#entries];
  }
}

export class EventCursor {
  lastSeq = 0;
  duplicates = 0;

  /**
   * Says whether an event numbered `seq` is new; throws ProtocolViolation if it skips ahead.
   * seq 0 marks events outside the journal (handshakes, warnings), each sent only once.
   */
  admit(seq) {
    exact(seq, "seq");
    if (seq === 0) {
      return true;
    }
    if (seq <= this.lastSeq) {
      this.duplicates += 1;
      return false;
    }
    if (seq !== this.lastSeq + 1) {
      throw new ProtocolViolation(`event seq ${seq} follows ${this.lastSeq}`);
    }
    this.lastSeq = seq;
    return true;
  }
}

/** Refuses a 64-bit number that a JavaScript Number could not hold exactly. */
function exact(value, name) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ProtocolViolation(`${name} ${value} is not a whole number below 2^53`);
  }
}

/** The server broke a numbering rule; resuming cannot repair it. */
export class ProtocolViolation extends Error {
  name = "ProtocolViolation";
}
