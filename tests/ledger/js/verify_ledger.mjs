#!/usr/bin/env node
// An independent verifier of pev ledger exports, written from docs/ledger-format.md alone.
//
//   node verify_ledger.mjs FILE [--key KEY] [--head SEQ:HASH]
//
// FILE holds one task's entries as JSON lines (`pev ledger export TASK`). Each event's canonical
// text is written again from the parsed JSON, in the form of the entry's schema (1: pev's own
// canonical JSON; 2 and 3: RFC 8785, integers exact), sealed again (sha256; HMAC-SHA256 under
// the key for schema 3) and compared with the stored hash; every entry must link to the one
// before.
// The key is --key or the PEV_LEDGER_KEY environment variable. --head checks the last entry
// against a head kept elsewhere (the task index, an anchor), which catches a dropped last event.
//
// Prints one line; exits 0 when the chain verifies, 1 when it does not, 2 on a usage error.
// Standard library only: no npm packages.

import { createHash, createHmac } from "node:crypto";
import { readFileSync } from "node:fs";

const GENESIS = "0".repeat(64);
const KNOWN_SCHEMAS = new Set([1, 2, 3]);
const KEYED = 3;

class Failure extends Error {}

// --- a JSON parser that keeps each number's text --------------------------------------------
// JSON.parse would turn 1.0 into 1, and schema 1 writes 1.0 and 1 differently.

function parseJson(text) {
  let at = 0;
  const fail = (why) => {
    throw new Failure(`not JSON at character ${at}: ${why}`);
  };
  const space = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at++;
  };
  const value = () => {
    space();
    const c = text[at];
    if (c === "{") return object();
    if (c === "[") return array();
    if (c === '"') return { type: "string", value: string() };
    if (c === "-" || (c >= "0" && c <= "9")) return number();
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return { type: "literal", value: word };
      }
    }
    return fail(`unexpected ${c === undefined ? "end" : JSON.stringify(c)}`);
  };
  const object = () => {
    at++;
    const members = [];
    const seen = new Set();
    space();
    if (text[at] === "}") {
      at++;
      return { type: "object", members };
    }
    for (;;) {
      space();
      if (text[at] !== '"') fail("expected a key");
      const key = string();
      if (seen.has(key)) fail(`duplicate key ${JSON.stringify(key)}`);
      seen.add(key);
      space();
      if (text[at] !== ":") fail("expected ':'");
      at++;
      members.push([key, value()]);
      space();
      if (text[at] === ",") {
        at++;
        continue;
      }
      if (text[at] === "}") {
        at++;
        return { type: "object", members };
      }
      fail("expected ',' or '}'");
    }
  };
  const array = () => {
    at++;
    const items = [];
    space();
    if (text[at] === "]") {
      at++;
      return { type: "array", items };
    }
    for (;;) {
      items.push(value());
      space();
      if (text[at] === ",") {
        at++;
        continue;
      }
      if (text[at] === "]") {
        at++;
        return { type: "array", items };
      }
      fail("expected ',' or ']'");
    }
  };
  const string = () => {
    const match = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(
      text.slice(at),
    );
    if (!match) fail("a bad string");
    at += match[0].length;
    return JSON.parse(match[0]);
  };
  const number = () => {
    const match = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(text.slice(at));
    if (!match) fail("a bad number");
    at += match[0].length;
    return { type: "number", text: match[0] };
  };
  const parsed = value();
  space();
  if (at !== text.length) fail("text after the value");
  return parsed;
}

// --- canonical texts --------------------------------------------------------------------------

const isInteger = (numberText) => !/[.eE]/.test(numberText);
const MAX_INTEGER_DIGITS = 640; // the most an integer of schemas 2 and 3 has (§3.3)

// Python's repr of a double: the shortest digits that round-trip, positional for exponents
// -4..15 (with ".0" when integral), else d.ddde+XX with at least two exponent digits.
function pythonFloat(x) {
  if (!Number.isFinite(x)) throw new Failure(`${x} is not a JSON number`);
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exponentText] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const e = Number(exponentText);
  if (e < -4 || e >= 16) {
    const m = digits.length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
    return `${sign}${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  if (e < 0) return `${sign}0.${"0".repeat(-e - 1)}${digits}`;
  if (digits.length <= e + 1) return `${sign}${digits}${"0".repeat(e + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, e + 1)}.${digits.slice(e + 1)}`;
}

function pevNumber(numberText) {
  return isInteger(numberText) ? BigInt(numberText).toString() : pythonFloat(Number(numberText));
}

// RFC 8785 writes every number as a double; pev writes an integer (a number without a fraction
// or an exponent) as its exact decimal digits (§3.3). Within ±(2**53 - 1) that is the double's
// text, and so is an integral double's text beyond (1e20 is 100000000000000000000, which reads
// as that integer).
function jcsNumber(numberText) {
  if (isInteger(numberText)) {
    const digits = numberText.replace("-", "").length;
    if (digits > MAX_INTEGER_DIGITS) {
      throw new Failure(`an integer of ${digits} digits, more than the ${MAX_INTEGER_DIGITS} a ledger records`);
    }
    return BigInt(numberText).toString();
  }
  const value = Number(numberText);
  if (!Number.isFinite(value)) throw new Failure(`${numberText} is not a finite JSON number`);
  return String(value); // ECMAScript's Number::toString is RFC 8785's number form
}

function byCodePoint(a, b) {
  const left = [...a].map((c) => c.codePointAt(0));
  const right = [...b].map((c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    if (left[i] !== right[i]) return left[i] - right[i];
  }
  return left.length - right.length;
}

const byCodeUnit = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function canonical(node, schema) {
  switch (node.type) {
    case "string":
      return JSON.stringify(node.value);
    case "literal":
      return node.value;
    case "number":
      return schema === 1 ? pevNumber(node.text) : jcsNumber(node.text);
    case "array":
      return `[${node.items.map((item) => canonical(item, schema)).join(",")}]`;
    case "object": {
      const members = [...node.members].sort(([a], [b]) =>
        schema === 1 ? byCodePoint(a, b) : byCodeUnit(a, b),
      );
      const pairs = members.map(([key, item]) => `${JSON.stringify(key)}:${canonical(item, schema)}`);
      return `{${pairs.join(",")}}`;
    }
    default:
      throw new Failure(`unknown node ${node.type}`);
  }
}

// --- the chain --------------------------------------------------------------------------------

function field(entry, name, type) {
  const member = entry.members.find(([key]) => key === name);
  if (!member) throw new Failure(`it has no "${name}"`);
  const node = member[1];
  if (type === "integer") {
    if (node.type !== "number" || !isInteger(node.text)) throw new Failure(`"${name}" is not an integer`);
    return Number(node.text);
  }
  if (type === "string") {
    if (node.type !== "string") throw new Failure(`"${name}" is not a string`);
    return node.value;
  }
  return node;
}

function seal(schema, key, text) {
  if (schema === KEYED) return createHmac("sha256", Buffer.from(key, "utf8")).update(text, "utf8").digest("hex");
  return createHash("sha256").update(text, "utf8").digest("hex");
}

function verify(lines, key, head) {
  let taskId = null;
  let prevHash = GENESIS;
  let firstKeyed = 0;
  lines.forEach((line, index) => {
    const seq = index + 1;
    const where = `event ${seq}`;
    let entry;
    try {
      entry = parseJson(line);
      if (entry.type !== "object") throw new Failure("a line is not a JSON object");
    } catch (error) {
      throw new Failure(`line ${seq}: ${error.message}`);
    }
    let fields;
    try {
      fields = {
        taskId: field(entry, "task_id", "string"),
        seq: field(entry, "seq", "integer"),
        at: field(entry, "at", "string"),
        schema: field(entry, "schema", "integer"),
        prevHash: field(entry, "prev_hash", "string"),
        hash: field(entry, "hash", "string"),
        event: field(entry, "event", "node"),
      };
    } catch (error) {
      throw new Failure(`line ${seq}: ${error.message}`);
    }
    taskId ??= fields.taskId;
    if (fields.taskId !== taskId) throw new Failure(`${where} belongs to task ${fields.taskId}, not ${taskId}`);
    if (fields.seq !== seq) throw new Failure(`expected event ${seq} on line ${seq}, found event ${fields.seq} (dropped or reordered)`);
    if (fields.prevHash !== prevHash) throw new Failure(`${where} does not link to the event before it (dropped or reordered)`);
    if (!KNOWN_SCHEMAS.has(fields.schema)) throw new Failure(`${where} has event schema ${fields.schema}, which this verifier does not know`);
    if (firstKeyed && fields.schema !== KEYED) throw new Failure(`${where} is not sealed with the key, but event ${firstKeyed} before it is`);
    if (fields.schema === KEYED && key === undefined) throw new Failure(`${where} is sealed with a key: set PEV_LEDGER_KEY (or --key) to verify it`);
    let text;
    try {
      text = canonical(fields.event, fields.schema);
    } catch (error) {
      throw new Failure(`${where}: ${error.message}`);
    }
    const header = `[${JSON.stringify(fields.taskId)},${fields.seq},${JSON.stringify(fields.at)},${fields.schema},${JSON.stringify(fields.prevHash)}]`;
    if (seal(fields.schema, key, `${header}\n${text}`) !== fields.hash) {
      throw new Failure(`${where} was changed after it was written (its ${fields.schema === KEYED ? "HMAC seal" : "hash"} does not match)`);
    }
    if (fields.schema === KEYED && !firstKeyed) firstKeyed = seq;
    prevHash = fields.hash;
  });
  if (head) {
    if (head.seq !== lines.length) throw new Failure(`the head says ${head.seq} events but the file holds ${lines.length}`);
    if (head.hash !== prevHash) throw new Failure("the last event's hash differs from the head's");
  }
  const keyed = firstKeyed ? lines.length - firstKeyed + 1 : 0;
  return `ok: ${lines.length} events of task ${taskId} verified (${keyed} sealed with the key)`;
}

function main(argv) {
  const args = [...argv];
  let file;
  let key = process.env.PEV_LEDGER_KEY || undefined;
  let head;
  while (args.length) {
    const arg = args.shift();
    if (arg === "--key") key = args.shift();
    else if (arg === "--head") {
      const match = /^([0-9]+):([0-9a-f]{64})$/.exec(args.shift() ?? "");
      if (!match) return usage("--head takes SEQ:HASH");
      head = { seq: Number(match[1]), hash: match[2] };
    } else if (file === undefined && !arg.startsWith("--")) file = arg;
    else return usage(`unknown argument ${arg}`);
  }
  if (file === undefined) return usage("name the exported file");
  let content;
  try {
    content = new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(file));
  } catch (error) {
    console.log(`FAIL: ${file} cannot be read as UTF-8 text: ${error.message}`);
    return 1;
  }
  const lines = content.split("\n");
  if (lines.at(-1) === "") lines.pop();
  try {
    if (!lines.length) throw new Failure(`${file} holds no events`);
    console.log(verify(lines, key, head));
    return 0;
  } catch (error) {
    if (!(error instanceof Failure)) throw error;
    console.log(`FAIL: ${error.message}`);
    return 1;
  }
}

function usage(problem) {
  console.log(`usage: node verify_ledger.mjs FILE [--key KEY] [--head SEQ:HASH] (${problem})`);
  return 2;
}

process.exitCode = main(process.argv.slice(2));
