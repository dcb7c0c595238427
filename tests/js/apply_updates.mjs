// Applies Yjs updates to one fresh Y.Doc, in the order given, and prints what it became.
//
//   node js/apply_updates.mjs < updates.json     (a JSON array of base64 strings)
//
// Prints one JSON line: {"text": <Y.Text "content">, "map": <Y.Map "meta" as JSON>,
// "stateVector": <base64>, "pending": <structs still waiting for their dependencies>}.

import * as Y from 'yjs'

let input = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => { input += chunk })
process.stdin.on('end', () => {
  const doc = new Y.Doc()
  for (const encoded of JSON.parse(input)) Y.applyUpdate(doc, Buffer.from(encoded, 'base64'))
  process.stdout.write(JSON.stringify({
    text: doc.getText('content').toString(),
    map: doc.getMap('meta').toJSON(),
    stateVector: Buffer.from(Y.encodeStateVector(doc)).toString('base64'),
    pending: doc.store.pendingStructs !== null || doc.store.pendingDs !== null
  }) + '\n')
})
