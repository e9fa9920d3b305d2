// The response types the official Node client (tremendous 4.12) declares in dist/api.d.ts,
// read from that file, and a checker of a JSON value against them. Used by client_check.js.
//
// What is checked, per the TypeScript declarations (docs/approvals.md, "Node client"):
// - a key declared optional but not nullable (`'key'?: T`) is absent or a T, never null;
// - a key declared required (`'key': T`) is present, and null only when T includes null;
// - strings, numbers, booleans and arrays are what the declaration says;
// - string enums (`XEnum`) hold one of their declared values;
// - nested objects and array items are checked against their own declared interfaces.
"use strict";

const fs = require("fs");
const path = require("path");

function load(dtsPath) {
  const source = fs.readFileSync(dtsPath, "utf8");
  const interfaces = {};
  const enums = {};
  const aliases = {};
  let current = null;
  let depth = 0;
  for (const line of source.split("\n")) {
    let m;
    if (!current && (m = line.match(/^export interface (\w+) \{/))) {
      current = interfaces[m[1]] = {};
      depth = 1;
      continue;
    }
    if (current) {
      if (depth === 1 && (m = line.match(/^    '([^']+)'(\??): (.+);$/))) {
        current[m[1]] = { optional: m[2] === "?", type: m[3].trim() };
      } else if (depth === 1 && (m = line.match(/^    '([^']+)'(\??): \{$/))) {
        current[m[1]] = { optional: m[2] === "?", type: "object" };
        current.__nested = m[1];
        depth += 1;
      } else if ((m = line.match(/^\s*\}( \| null)?;?$/))) {
        // A nested object's type may end "} | null;" (FraudRulesListItem's 'config'): nullable.
        depth -= 1;
        if (depth === 1 && m[1] && current.__nested) current[current.__nested].type = "object | null";
        if (depth === 0) {
          delete current.__nested;
          current = null;
        }
      }
      continue;
    }
    if ((m = line.match(/^export declare const (\w+): \{$/))) {
      enums[m[1]] = [];
      current = null;
      enums.__open = m[1];
      continue;
    }
    if (enums.__open && (m = line.match(/^    readonly \w+: "([^"]*)";$/))) {
      enums[enums.__open].push(m[1]);
      continue;
    }
    if (enums.__open && /^\};$/.test(line)) {
      enums.__open = null;
      continue;
    }
    if ((m = line.match(/^export type (\w+) = ([\w| ]+);$/)) && !line.includes("typeof")) {
      aliases[m[1]] = m[2].split("|").map((s) => s.trim());
    }
  }
  delete enums.__open;
  return { interfaces, enums, aliases };
}

function typeName(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

// Check `value` against the declared type text `type` (e.g. "string | null", "Array<X>", "X").
function checkType(types, value, type, where, problems) {
  const alternatives = splitUnion(type);
  const nullable = alternatives.includes("null");
  if (value === null) {
    if (!nullable) problems.push(`${where}: null, but declared ${type}`);
    return;
  }
  const candidates = alternatives.filter((t) => t !== "null");
  const errors = [];
  for (const candidate of candidates) {
    const local = [];
    checkOne(types, value, candidate, where, local);
    if (local.length === 0) return;
    errors.push(local);
  }
  // No alternative fits: report the first one's findings (single-type declarations are the rule).
  problems.push(...(errors[0] || []));
}

function splitUnion(type) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < type.length; i++) {
    const c = type[i];
    if (c === "<" || c === "{") depth++;
    else if (c === ">" || c === "}") depth--;
    else if (c === "|" && depth === 0) {
      parts.push(type.slice(start, i).trim());
      start = i + 1;
    }
  }
  parts.push(type.slice(start).trim());
  return parts;
}

function checkOne(types, value, type, where, problems) {
  const actual = typeName(value);
  let m;
  if (type === "string" || type === "number" || type === "boolean") {
    if (actual !== type) problems.push(`${where}: ${actual} ${JSON.stringify(value)}, but declared ${type}`);
    return;
  }
  if (type === "any" || type === "object" || type.startsWith("{")) {
    if (type !== "any" && actual !== "object") problems.push(`${where}: ${actual}, but declared an object`);
    return;
  }
  if ((m = type.match(/^Array<(.+)>$/))) {
    if (actual !== "array") {
      problems.push(`${where}: ${actual}, but declared ${type}`);
      return;
    }
    value.forEach((item, i) => checkType(types, item, m[1], `${where}[${i}]`, problems));
    return;
  }
  if (types.enums[type]) {
    if (!types.enums[type].includes(value)) {
      problems.push(`${where}: ${JSON.stringify(value)} is not one of ${type} (${types.enums[type].join(", ")})`);
    }
    return;
  }
  if (types.aliases[type]) {
    checkType(types, value, types.aliases[type].join(" | "), where, problems);
    return;
  }
  if (types.interfaces[type]) {
    if (actual !== "object") {
      problems.push(`${where}: ${actual}, but declared ${type}`);
      return;
    }
    checkObject(types, value, type, where, problems);
    return;
  }
  problems.push(`${where}: unknown declared type ${type}`);
}

function checkObject(types, value, name, where, problems) {
  const declared = types.interfaces[name];
  for (const [key, spec] of Object.entries(declared)) {
    const here = `${where}.${key}`;
    if (!(key in value) || value[key] === undefined) {
      if (!spec.optional) problems.push(`${here}: missing, but required by ${name}`);
      continue;
    }
    if (value[key] === null && !splitUnion(spec.type).includes("null")) {
      problems.push(`${here}: null, but ${name} declares '${key}'${spec.optional ? "?" : ""}: ${spec.type}` +
                    (spec.optional ? " (leave the key out)" : ""));
      continue;
    }
    checkType(types, value[key], spec.type, here, problems);
  }
}

function checker(dtsPath) {
  const types = load(dtsPath || path.join(__dirname, "..", "..", "node_modules", "tremendous", "dist", "api.d.ts"));
  return {
    types,
    check(value, name, where = name) {
      const problems = [];
      if (!types.interfaces[name]) throw new Error(`no interface ${name} in api.d.ts`);
      checkObject(types, value, name, where, problems);
      return problems;
    },
  };
}

module.exports = { checker, load };
