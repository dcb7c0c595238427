// ProseMirror JSON as Tiptap itself makes and checks it: @tiptap/core with StarterKit, no DOM.
//   node tiptap_json.mjs --check    JSON on stdin -> Node.fromJSON(schema, json).check(), then
//                                   the node's toJSON() (what editor.getJSON() gives for it);
//                                   exit 1 with the reason if the schema refuses it
//   node tiptap_json.mjs --editor   a document (JSON) on stdin -> a headless Editor holding it,
//                                   a few commands typed into it, then editor.getJSON()
import { Editor, getSchema } from '@tiptap/core'
import { Node } from '@tiptap/pm/model'
import StarterKit from '@tiptap/starter-kit'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const input = JSON.parse(Buffer.concat(chunks).toString('utf8'))

if (process.argv[2] === '--check') {
  const node = Node.fromJSON(getSchema([StarterKit]), input)
  node.check() // throws on content, marks or attributes the schema does not allow
  process.stdout.write(JSON.stringify(node.toJSON()))
} else {
  const editor = new Editor({ element: null, extensions: [StarterKit], content: input })
  const end = () => editor.state.doc.content.size
  const find = (word) => { // the range of the last text holding ``word``
    let found = null
    editor.state.doc.descendants((node, pos) => {
      const at = node.isText ? node.text.indexOf(word) : -1
      if (at >= 0) found = { from: pos + at, to: pos + at + word.length }
    })
    return found
  }
  // What a writer does: a heading, a bold word in a new paragraph, a task for a link, a list.
  editor.chain().insertContentAt(end(), { type: 'heading', attrs: { level: 3 }, content: [{ type: 'text', text: 'Added in the editor' }] }).run()
  editor.chain().insertContentAt(end(), { type: 'paragraph', content: [{ type: 'text', text: 'plain, then bold and italic struck' }] }).run()
  editor.chain().setTextSelection(find('bold')).toggleBold().run()
  editor.chain().setTextSelection(find('italic struck')).toggleItalic().run()
  editor.chain().setTextSelection(find('struck')).toggleStrike().run()
  editor.chain().insertContentAt(end(), { type: 'paragraph', content: [{ type: 'text', text: 'a link', marks: [{ type: 'link', attrs: { href: 'https://tiptap.dev' } }] }] }).run()
  editor.chain().insertContentAt(end(), { type: 'orderedList', attrs: { start: 4 }, content: [{ type: 'listItem', content: [{ type: 'paragraph', content: [{ type: 'text', text: 'fourth' }] }] }] }).run()
  editor.chain().insertContentAt(end(), { type: 'codeBlock', attrs: { language: 'python' }, content: [{ type: 'text', text: 'print("hi")\n' }] }).run()
  process.stdout.write(JSON.stringify(editor.getJSON()))
  editor.destroy()
}
