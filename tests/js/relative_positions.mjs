// Relative positions as the editors users run make them, with where Yjs itself resolves each,
// for the server's resolver to be checked against.
//   node relative_positions.mjs < prosemirror.json
//   node relative_positions.mjs --at < {"update": base64, "at": [[path, utf16 index, assoc]...]}
//     prints the anchors (base64) Y.createRelativePositionFromTypeIndex makes at each place of
//     the fragment "default" (path: child indexes to a Y.XmlText or an element)
// Builds a Tiptap (StarterKit) document with y-prosemirror, then has two more clients edit it
// concurrently (accents, emoji, a bold range, deletions, a paste inside a run), and the plain
// Y.Text "content" the same way. Prints JSON: the update (base64) and, for every cursor
// y-prosemirror can produce in a textblock and every index (both assocs) of the plain text,
// the encoded position, the path of child indexes to the text (or empty element) Yjs resolves
// it to, the UTF-16 index there, and that text.
import * as Y from 'yjs'
import { getSchema } from '@tiptap/core'
import StarterKit from '@tiptap/starter-kit'
import {
  prosemirrorJSONToYDoc, initProseMirrorDoc, absolutePositionToRelativePosition
} from 'y-prosemirror'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
if (process.argv[2] === '--at') {
  const { update, at } = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const ydoc = new Y.Doc()
  Y.applyUpdate(ydoc, Buffer.from(update, 'base64'))
  const anchors = at.map(([path, index, assoc]) => {
    let type = ydoc.getXmlFragment('default')
    for (const step of path) type = type.get(step)
    const rel = Y.createRelativePositionFromTypeIndex(type, index, assoc)
    return Buffer.from(Y.encodeRelativePosition(rel)).toString('base64')
  })
  process.stdout.write(JSON.stringify(anchors))
  process.exit(0)
}
const schema = getSchema([StarterKit])
const base = prosemirrorJSONToYDoc(schema, JSON.parse(Buffer.concat(chunks).toString('utf8')), 'default')

const sync = (a, b) => {
  Y.applyUpdate(b, Y.encodeStateAsUpdate(a, Y.encodeStateVector(b)))
  Y.applyUpdate(a, Y.encodeStateAsUpdate(b, Y.encodeStateVector(a)))
}
const texts = (type, out = []) => {
  for (const child of type.toArray()) {
    if (child instanceof Y.XmlText) out.push(child)
    else if (child instanceof Y.XmlElement) texts(child, out)
  }
  return out
}
const one = new Y.Doc(); const two = new Y.Doc()
sync(base, one); sync(base, two)
const plainOne = one.getText('content'); const plainTwo = two.getText('content')
plainOne.insert(0, 'plain héllo wörld, ')
plainOne.insert(plainOne.length, 'then 😀 and more')
sync(one, two)
// Concurrent edits: each client writes inside the other's runs.
const [t1] = texts(one.getXmlFragment('default'))
t1.insert(3, 'ümlaut 😀 ', {}); t1.format(0, 5, { bold: {} }); t1.delete(1, 1)
const t2s = texts(two.getXmlFragment('default'))
t2s[0].insert(t2s[0].length, ' tail ✓'); t2s[t2s.length - 1].insert(1, 'ñ😀x')
plainTwo.insert(6, 'ça ✓ '); plainOne.delete(2, 3); plainOne.insert(10, '日本')
sync(one, two); sync(base, one)

const ydoc = base
const fragment = ydoc.getXmlFragment('default')
const pathOf = (type) => {
  const path = []
  while (type !== fragment) {
    const parent = type._item.parent
    path.unshift(parent.toArray().indexOf(type))
    type = parent
  }
  return path
}
const cases = []
const { doc, mapping } = initProseMirrorDoc(fragment, schema)
for (let pos = 0; pos <= doc.content.size; pos++) {
  const $pos = doc.resolve(pos)
  if (!$pos.parent.isTextblock) continue
  const rel = absolutePositionToRelativePosition(pos, fragment, mapping)
  const abs = Y.createAbsolutePositionFromRelativePosition(rel, ydoc)
  if (abs === null || abs.type === fragment) continue
  cases.push({
    pos,
    anchor: Buffer.from(Y.encodeRelativePosition(rel)).toString('base64'),
    path: pathOf(abs.type),
    index: abs.index,
    text: abs.type instanceof Y.XmlText ? abs.type.toString() === '' ? '' : abs.type.toDelta().map((d) => d.insert).join('') : null
  })
}
const plain = ydoc.getText('content')
const plainCases = []
for (let index = 0; index <= plain.length; index++) {
  for (const assoc of [0, -1]) {
    const rel = Y.createRelativePositionFromTypeIndex(plain, index, assoc)
    const abs = Y.createAbsolutePositionFromRelativePosition(rel, ydoc)
    plainCases.push({ anchor: Buffer.from(Y.encodeRelativePosition(rel)).toString('base64'), index: abs.index })
  }
}
process.stdout.write(JSON.stringify({
  update: Buffer.from(Y.encodeStateAsUpdate(ydoc)).toString('base64'),
  plain: plain.toString(),
  cases,
  plainCases
}))
