// Shared plumbing for the scripted JS editors used by the interop tests.
//
// Line protocol (one JSON object per line):
//   stdin  commands: {"cmd": "insert"|"delete"|"text"|"awareness"|"stateless"|"state"|
//                     "ping"|"disconnect"|"connect"|"attach"|"detach"|"quit", ...}
//   stdout events:   {"event": "ready"|"status"|"synced"|"text"|"unsynced"|"authenticated"|
//                     "denied"|"awareness"|"stateless"|"close"|"connection-error"|"state"|
//                     "pong"|"frame"|"bye"|"error", ...}
// See tests/jsclient.py for the Python side.

import { createHash } from 'node:crypto'
import * as readline from 'node:readline'
import WebSocket from 'ws'

/** Write one event line to stdout. Never throws. */
export function emit (event) {
  let line
  try {
    line = JSON.stringify(event)
  } catch (err) {
    line = JSON.stringify({ event: 'error', message: `unserialisable event: ${err}` })
  }
  process.stdout.write(line + '\n')
}

export function emitError (err, extra = {}) {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err)
  const stack = err instanceof Error && err.stack ? err.stack : undefined
  emit({ event: 'error', message, stack, ...extra })
}

/** Report every uncaught exception / rejection as an error event instead of dying silently. */
export function installCrashHandlers () {
  process.on('uncaughtException', (err) => {
    if (!(err instanceof FatalExit)) emitError(err, { where: 'uncaughtException' })
  })
  process.on('unhandledRejection', (err) => emitError(err, { where: 'unhandledRejection' }))
  // The libraries log protocol problems with console.error/warn: surface them as events too
  // (on stdout, so they show up in the event history), and keep them on stderr.
  for (const level of ['error', 'warn']) {
    const original = console[level].bind(console)
    console[level] = (...args) => {
      emit({ event: 'console', level, message: args.map(String).join(' ') })
      original(...args)
    }
  }
}

/**
 * Tiny argv parser: `--key value` pairs and bare `--flag`s (value true).
 * `spec` maps option names to default values; unknown options are an error.
 */
export function parseArgs (argv, spec) {
  try {
    return parseArgsOrThrow(argv, spec)
  } catch (err) {
    fatal(err.message)
  }
}

/** Report a usage error and exit 2 (the Python side sees an error event, then EOF). */
export function fatal (message) {
  emit({ event: 'error', message, fatal: true })
  process.stdout.write('', () => process.exit(2))
  // Stop evaluating the caller until the write callback exits the process.
  throw new FatalExit(message)
}

class FatalExit extends Error {}

function parseArgsOrThrow (argv, spec) {
  const out = { ...spec }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    if (!arg.startsWith('--')) throw new Error(`unexpected argument ${JSON.stringify(arg)}`)
    const key = arg.slice(2)
    if (!(key in spec)) throw new Error(`unknown option --${key}`)
    if (typeof spec[key] === 'boolean') {
      out[key] = true
    } else {
      if (i + 1 >= argv.length) throw new Error(`option --${key} needs a value`)
      out[key] = argv[++i]
    }
  }
  return out
}

/** Awareness states as a JSON-friendly list, sorted by clientID. */
export function awarenessList (awareness) {
  return Array.from(awareness.getStates().entries())
    .sort((a, b) => a[0] - b[0])
    .map(([clientID, state]) => ({ clientID, state }))
}

/**
 * Emit a text event after every transaction that changes the text (local or remote). With
 * `summary` (big documents) the event carries only the text's length (UTF-16 units).
 */
export function watchText (doc, ytext, summary = false) {
  ytext.observe((yevent) => {
    const origin = yevent.transaction.origin
    const fields = summary ? { length: ytext.length } : { text: ytext.toString() }
    emit({ event: 'text', doc, ...fields, local: yevent.transaction.local, origin: originName(origin) })
  })
}

/** `{text}`, or `{length, sha256}` of the text with `summary`. */
export function textFields (ytext, summary) {
  const text = ytext.toString()
  if (!summary) return { text }
  return { length: text.length, sha256: createHash('sha256').update(text, 'utf8').digest('hex') }
}

function originName (origin) {
  if (origin === null || origin === undefined) return null
  if (typeof origin === 'string' || typeof origin === 'number') return origin
  return origin.constructor?.name ?? typeof origin
}

/** Emit the full awareness list on every awareness change (not on the 15 s renewals). */
export function watchAwareness (doc, awareness) {
  awareness.on('change', ({ added, updated, removed }, origin) => {
    emit({
      event: 'awareness',
      doc,
      states: awarenessList(awareness),
      added,
      updated,
      removed,
      local: origin === 'local'
    })
  })
}

/** Apply an insert/delete command to a Y.Text (indices in UTF-16 code units, as JS strings). */
export function applyTextCommand (ytext, cmd) {
  const len = ytext.length
  if (cmd.cmd === 'insert') {
    const index = cmd.index ?? len
    if (!Number.isInteger(index) || index < 0 || index > len) {
      throw new RangeError(`insert index ${index} out of range 0..${len}`)
    }
    if (typeof cmd.text !== 'string') throw new TypeError('insert needs a string "text"')
    ytext.insert(index, cmd.text)
  } else {
    const { index, length } = cmd
    if (!Number.isInteger(index) || !Number.isInteger(length) || index < 0 || length < 0 ||
        index + length > len) {
      throw new RangeError(`delete ${index}+${length} out of range (length ${len})`)
    }
    ytext.delete(index, length)
  }
}

/**
 * A `ws` WebSocket subclass that reports every binary frame in/out as a `frame` event
 * (hex), for protocol debugging. Used only with --trace.
 */
export function tracingWebSocket (describe) {
  return class TracingWebSocket extends WebSocket {
    constructor (...args) {
      super(...args)
      this.addEventListener('message', (ev) => {
        const bytes = new Uint8Array(ev.data)
        emit({ event: 'frame', dir: 'in', ...describe(bytes), hex: Buffer.from(bytes).toString('hex') })
      })
    }

    send (data, ...rest) {
      const bytes = data instanceof Uint8Array ? data : new Uint8Array(data)
      emit({ event: 'frame', dir: 'out', ...describe(bytes), hex: Buffer.from(bytes).toString('hex') })
      return super.send(data, ...rest)
    }
  }
}

/**
 * Read JSON commands from stdin, one per line, and dispatch them to `handlers[cmd]`.
 * Handlers may be async; they run strictly in order. Errors become error events.
 * EOF on stdin means quit.
 */
export function runCommandLoop (handlers) {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  let chain = Promise.resolve()
  let quitting = false
  const run = async (cmd) => {
    const handler = handlers[cmd.cmd]
    if (!handler) throw new Error(`unknown command ${JSON.stringify(cmd.cmd)}`)
    await handler(cmd)
  }
  rl.on('line', (line) => {
    if (!line.trim()) return
    let cmd
    try {
      cmd = JSON.parse(line)
    } catch (err) {
      emitError(err, { line })
      return
    }
    if (cmd.cmd === 'quit') quitting = true
    chain = chain.then(() => run(cmd)).catch((err) => emitError(err, { cmd }))
  })
  rl.on('close', () => {
    if (!quitting) {
      quitting = true
      chain = chain.then(() => run({ cmd: 'quit' })).catch((err) => emitError(err))
    }
  })
}

/** Wait until every socket is CLOSED (readyState 3) or `ms` elapsed. */
export async function waitClosed (sockets, ms = 1000) {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (sockets.every((ws) => !ws || ws.readyState === 3)) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** Emit `bye`, flush stdout, exit 0. */
export function exitClean () {
  emit({ event: 'bye' })
  process.stdout.write('', () => process.exit(0))
}
