/**
 * React elements rendered to HTML text (react-dom/server: no DOM in these tests), and small
 * readers of that text.
 */
import * as React from 'react';

const server = jest.requireActual<{
  renderToStaticMarkup: (element: React.ReactElement) => string;
}>('react-dom/server');

/** The HTML `element` renders to, on first render (no effects run). */
export function render(element: React.ReactElement): string {
  return server.renderToStaticMarkup(element);
}

/** The opening tags of `tag` elements whose class list holds `className`. */
export function tags(html: string, tag: string, className: string): string[] {
  const out: string[] = [];
  const pattern = new RegExp(`<${tag}\\b[^>]*>`, 'g');
  for (const match of html.match(pattern) ?? []) {
    const classes = /\sclass="([^"]*)"/.exec(match)?.[1].split(/\s+/) ?? [];
    if (classes.includes(className)) {
      out.push(match);
    }
  }
  return out;
}

/** An attribute of an opening tag. */
export function attr(tag: string, name: string): string | null {
  const match = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  return match ? match[1] : null;
}

/** The text of each element of class `className` (the tags inside it left out). */
export function texts(html: string, className: string): string[] {
  const out: string[] = [];
  const pattern = /<(\w+)\b[^>]*\sclass="([^"]*)"[^>]*>/g;
  let match: RegExpExecArray | null;
  while ((match = pattern.exec(html)) !== null) {
    if (!match[2].split(/\s+/).includes(className)) {
      continue;
    }
    // The element's content up to its own closing tag, elements of the same tag inside counted.
    const rest = html.slice(match.index + match[0].length);
    const tagPattern = new RegExp(`<(/?)${match[1]}\\b[^>]*>`, 'g');
    let depth = 1;
    let end = rest.length;
    let inner: RegExpExecArray | null;
    while ((inner = tagPattern.exec(rest)) !== null) {
      depth += inner[1] ? -1 : 1;
      if (depth === 0) {
        end = inner.index;
        break;
      }
    }
    out.push(unescape(rest.slice(0, end).replace(/<[^>]*>/g, '')));
  }
  return out;
}

/** HTML text as read. */
export function unescape(text: string): string {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#x27;/g, "'")
    .replace(/&amp;/g, '&');
}
