/**
 * Kernel starts the server refused, as JupyterLab's services see them: the session manager's
 * `startNew` (a notebook's or console's first kernel) and each session's `changeKernel` reject
 * with a `ServerConnection.ResponseError` whose response names the refusal
 * (`X-Jupyter-VGPU-Refusal`, the `refusal_id` of its JSON body, which the services have read
 * by then). Nothing here reads the page or the error's text.
 */
import { PathExt } from '@jupyterlab/coreutils';
import { Session } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

/** The header of a refused start's reply that names its refusal (the server's REFUSAL_HEADER). */
export const REFUSAL_HEADER = 'X-Jupyter-VGPU-Refusal';

/** What the server's refusal ids look like: 24 hexadecimal digits. */
const REFUSAL_ID = /^[0-9a-f]{24}$/;

/** A kernel start the server refused. */
export interface IRefusedStart {
  /** Its refusal (`GET /api/vgpu/refusals/<id>`). */
  refusalId: string;
  /** The notebook whose kernel did not start, when the request says. */
  path: string | null;
}

/** The refusal a failed kernel start's error names: its response's header; null for others. */
export function refusalIdOf(error: unknown): string | null {
  const response = (error as { response?: unknown } | null)?.response;
  const headers = (response as { headers?: unknown } | undefined)?.headers;
  if (!headers || typeof (headers as Headers).get !== 'function') {
    return null;
  }
  const id = (headers as Headers).get(REFUSAL_HEADER);
  return id && REFUSAL_ID.test(id) ? id : null;
}

/**
 * The notebook a session start is for: JupyterLab starts a notebook's session under a
 * temporary path in the notebook's folder (`dir/<uuid>`) with the notebook's name.
 */
function notebookPath(
  options: Partial<Session.ISessionOptions>
): string | null {
  if (options.type !== 'notebook' || !options.name || !options.path) {
    return null;
  }
  return PathExt.join(PathExt.dirname(options.path), options.name);
}

/**
 * Tells of each kernel start the server refused (`refused`), before JupyterLab answers the
 * failure itself (its "Error Starting Kernel" dialog follows in the same turn of the event
 * loop). Wraps the session manager's `startNew` and `connectTo` (for each session's
 * `changeKernel`); `dispose()` puts them back.
 */
export class RefusedStarts {
  constructor(sessions: Session.IManager) {
    const startNew = sessions.startNew;
    const connectTo = sessions.connectTo;
    this._restore = () => {
      sessions.startNew = startNew;
      sessions.connectTo = connectTo;
    };
    sessions.startNew = async (options, connectOptions) => {
      try {
        return await startNew.call(sessions, options, connectOptions);
      } catch (error) {
        this._report(error, notebookPath(options));
        throw error;
      }
    };
    sessions.connectTo = options =>
      this._follow(connectTo.call(sessions, options));
  }

  /** Emits for each refused start, as the services reject it. */
  get refused(): ISignal<this, IRefusedStart> {
    return this._refused;
  }

  get isDisposed(): boolean {
    return this._restore === null;
  }

  dispose(): void {
    if (this._restore) {
      this._restore();
      this._restore = null;
      Signal.clearData(this);
    }
  }

  /** Report the refused kernel changes of a session too. */
  private _follow(
    session: Session.ISessionConnection
  ): Session.ISessionConnection {
    const changeKernel = session.changeKernel;
    session.changeKernel = async options => {
      try {
        return await changeKernel.call(session, options);
      } catch (error) {
        if (!this.isDisposed) {
          this._report(error, session.path || null);
        }
        throw error;
      }
    };
    return session;
  }

  private _report(error: unknown, path: string | null): void {
    const refusalId = refusalIdOf(error);
    if (refusalId && !this.isDisposed) {
      this._refused.emit({ refusalId, path });
    }
  }

  private _refused = new Signal<this, IRefusedStart>(this);
  private _restore: (() => void) | null;
}
