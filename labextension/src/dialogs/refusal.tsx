/**
 * A refused kernel start, readable: what was asked and what fits, who holds each GPU, what to
 * do, and buttons that start a kernel that fits now.
 */
import * as React from 'react';

import { IRefusal } from '../store/api';
import { formatBytes, formatDuration, pathLabel } from '../format/format';

/** An opened "The server's message" scrolls into view (within the view's scrolling part). */
function showOpened(event: React.SyntheticEvent<HTMLDetailsElement>): void {
  const details = event.currentTarget;
  if (details.open) {
    details.scrollIntoView({ block: 'nearest' });
  }
}

/**
 * The server's sentences write commands and settings as markdown code spans
 * (`` `jupyter vgpu run --wait SECONDS` ``): shown as code, without the backticks.
 */
export function CodeSpans(props: { text: string }): JSX.Element {
  const parts = props.text.split(/`([^`]+)`/);
  return (
    <>
      {parts.map((part, i) =>
        i % 2 ? <code key={i}>{part}</code> : part ? part : null
      )}
    </>
  );
}

/** At most this many "Start ..." buttons (the server lists the largest that fits first). */
const MAX_SUGGESTIONS = 3;

function Holders(props: { gpu: IRefusal['gpus'][number] }): JSX.Element {
  const { gpu } = props;
  const holders = [...(gpu.holders ?? [])].sort(
    (a, b) => b.reserved - a.reserved
  );
  return (
    <ul className="jp-vgpu-Refusal-holders">
      {holders.map((h, i) => (
        <li key={i} className="jp-vgpu-Refusal-holder">
          <span className="jp-vgpu-Refusal-holderName" title={h.label}>
            {pathLabel(h.label)}
          </span>
          <span className="jp-vgpu-Refusal-holderSize">
            {formatBytes(h.reserved)}
          </span>
          <span className="jp-vgpu-Refusal-holderOwner">
            {h.yours ? 'yours' : h.owner}
          </span>
        </li>
      ))}
      {gpu.foreign > 0 && (
        <li className="jp-vgpu-Refusal-holder jp-vgpu-mod-foreign">
          <span className="jp-vgpu-Refusal-holderName">
            other processes (no slice)
          </span>
          <span className="jp-vgpu-Refusal-holderSize">
            {formatBytes(gpu.foreign)}
          </span>
          <span className="jp-vgpu-Refusal-holderOwner" />
        </li>
      )}
      {holders.length === 0 && gpu.foreign <= 0 && (
        <li className="jp-vgpu-Refusal-holder jp-vgpu-mod-empty">
          no slice on this GPU
        </li>
      )}
    </ul>
  );
}

/** The body that replaces JupyterLab's "Error Starting Kernel" text for a refused slice. */
export function RefusalView(props: {
  refusal: IRefusal;
  /** An installed kernelspec asking for the same slice that waits in line for it. */
  waiting?: { name: string; display_name: string } | null;
  /** Start the notebook on this kernelspec instead (closes the dialog). */
  onStart: (kernelName: string) => void;
}): JSX.Element {
  const { refusal: r, waiting, onStart } = props;
  const notebook = pathLabel(r.path);
  const suggestions = (r.suggested_kernels ?? []).slice(0, MAX_SUGGESTIONS);
  const summary = r.summary || r.message.split('\n')[0];
  const fits = r.fits_now?.text ?? '';
  return (
    <div className="jp-vgpu-Refusal" data-status={r.status}>
      <h3 className="jp-vgpu-Refusal-summary">
        <CodeSpans text={summary} />
      </h3>
      {/* The heading above and the buttons below stay in view: only this part scrolls. */}
      <div className="jp-vgpu-Refusal-scroll">
        {(r.asked || notebook) && (
          <p className="jp-vgpu-Refusal-asked">
            {notebook ? (
              <strong title={r.path ?? undefined}>{notebook}</strong>
            ) : (
              'The kernel'
            )}
            {r.asked ? (
              <>
                {' '}
                asked for <strong>{r.asked}</strong>
              </>
            ) : (
              ' did not start'
            )}
            {r.kernel_display_name ? (
              <> with “{r.kernel_display_name}”</>
            ) : null}
            {r.waited && !/wait/i.test(summary) ? (
              <> after waiting {formatDuration(r.waited)} in line</>
            ) : null}
            .
            {fits && !summary.includes(fits) ? (
              <>
                {' '}
                The most that fits now: <CodeSpans text={fits} />.
              </>
            ) : null}
          </p>
        )}
        {(r.gpus ?? []).length > 0 && (
          <ul className="jp-vgpu-Refusal-gpus" aria-label="Who holds the GPUs">
            {r.gpus.map(gpu => (
              <li
                key={gpu.index}
                className="jp-vgpu-Refusal-gpu"
                data-gpu-index={gpu.index}
              >
                <div className="jp-vgpu-Refusal-gpuHeader">
                  <span className="jp-vgpu-Refusal-gpuName">
                    GPU {gpu.index}
                    {gpu.name ? ` ${gpu.name}` : ''}
                  </span>
                  <span className="jp-vgpu-Refusal-gpuFree">
                    {formatBytes(gpu.free)} free of {formatBytes(gpu.total)}
                  </span>
                </div>
                <Holders gpu={gpu} />
              </li>
            ))}
          </ul>
        )}
        {(r.advice ?? []).length > 0 && (
          <ul className="jp-vgpu-Refusal-advice" aria-label="What you can do">
            {r.advice.map((a, i) => (
              <li key={i}>
                <CodeSpans text={a} />
              </li>
            ))}
          </ul>
        )}
        <details className="jp-vgpu-Refusal-raw" onToggle={showOpened}>
          <summary>The server's message</summary>
          <pre>{r.message}</pre>
        </details>
      </div>
      {(suggestions.length > 0 || waiting) && (
        <div className="jp-vgpu-Refusal-actions">
          {suggestions.map((k, i) => (
            <button
              key={k.name}
              className={`jp-Dialog-button jp-mod-styled jp-vgpu-Refusal-start ${i === 0 ? 'jp-mod-accept' : 'jp-vgpu-mod-secondary'}`}
              data-kernel-name={k.name}
              onClick={() => onStart(k.name)}
            >
              Start {k.display_name}
            </button>
          ))}
          {waiting && (
            <button
              className={`jp-Dialog-button jp-mod-styled jp-vgpu-Refusal-wait ${suggestions.length ? 'jp-vgpu-mod-secondary' : 'jp-mod-accept'}`}
              data-kernel-name={waiting.name}
              title={`Start “${waiting.display_name}”: it waits in line for ${r.asked}, first come, first served`}
              onClick={() => onStart(waiting.name)}
            >
              {r.reason === 'timed_out' ? 'Wait longer' : 'Wait in line'} (
              {waiting.display_name})
            </button>
          )}
        </div>
      )}
    </div>
  );
}

/** The short note that replaces the error after a request stopped waiting in line. */
export function StoppedWaitingView(props: {
  message: string;
  byYou: boolean;
}): JSX.Element {
  return (
    <div className="jp-vgpu-Refusal jp-vgpu-mod-cancelled">
      <h3 className="jp-vgpu-Refusal-summary">
        {props.byYou
          ? 'Cancelled: no longer waiting for a GPU slice.'
          : 'No longer waiting for a GPU slice.'}
      </h3>
      <div className="jp-vgpu-Refusal-scroll">
        <p className="jp-vgpu-Refusal-asked">
          The kernel did not start. Pick a kernel (or start this one again) to
          get back in line.
        </p>
        <details className="jp-vgpu-Refusal-raw" onToggle={showOpened}>
          <summary>The server's message</summary>
          <pre>{props.message}</pre>
        </details>
      </div>
    </div>
  );
}
