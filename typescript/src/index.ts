/**
 * openenv for TypeScript: the openenv.v1 bindings generated from proto/ (protobuf-es),
 * an async session client ({@link EnvClient}) and a server helper ({@link Server},
 * {@link serve}) so environments can be written in TypeScript.
 */

export { TOKEN_ENV, TokenSet, bearerToken, checkBind, isLoopbackHost } from "./auth.js";
export * from "./codec.js";
export * from "./client.js";
export * from "./environment.js";
export * from "./errors.js";
export { PROTOCOL_VERSION, SERVICE_NAME, parseUrl, serviceDefinition, environmentServiceDefinition } from "./grpc.js";
export { Runtime, Session, SessionManager, VectorSession, type RuntimeOptions } from "./session.js";
export {
  DEFAULT_HANDSHAKE_TIMEOUT_MS,
  Server,
  serve,
  serverCredentials,
  type ServeOptions,
  type ServerOptions,
  type TlsOptions,
} from "./server.js";
export { DEFAULT_MAX_PIPELINED_REQUESTS, answerPipelined } from "./pipelined.js";
export { DEFAULT_RESUME_GRACE_MS, Journal, Resumes } from "./resume.js";
export { MAX_TASKS_PAGE, TASK_OPTION, TaskCatalog } from "./tasks.js";
export { SUBPROTOCOL, closeError, isWebSocketUrl, webSocketConnector, type WebSocketOptions } from "./ws.js";
export * from "./tools.js";
export { gridworld, GridWorld } from "./envs/gridworld.js";
export { echo, Echo } from "./envs/echo.js";
export { tictactoe, TicTacToe, type TicTacToeView } from "./envs/tictactoe.js";
export { Seat, World, Worlds, multiAgent, type MultiAgentDeclaration, type MultiAgentDefinition,
  type MultiAgentEnvironment, type WorldStep } from "./world.js";
export * as pb from "./gen/openenv/v1/environment_pb.js";
export * as payloadPb from "./gen/openenv/v1/payload_pb.js";
export * as toolPb from "./gen/openenv/v1/tool_pb.js";
export * as rubricPb from "./gen/openenv/v1/rubric_pb.js";
export * as errorPb from "./gen/openenv/v1/error_pb.js";
export * as loadPb from "./gen/openenv/v1/load_pb.js";
export * as taskPb from "./gen/openenv/v1/task_pb.js";
export * as multiagentPb from "./gen/openenv/v1/multiagent_pb.js";
/** Training traces (RFC 0017): the generated messages only (this binding writes and reads none). */
export * as tracePb from "./gen/openenv/v1/trace_pb.js";
export * as gridworldPb from "./gen/gridworld/v1/gridworld_pb.js";
