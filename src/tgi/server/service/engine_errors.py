"""How the engine's refusals and failures reach a client: each as the `ApiError` its route answers with."""

from __future__ import annotations

from tgi.core.guided import CompilerBusyError
from tgi.core.request import EngineError, EngineRequest, UnusableGrammarError, ValidationError
from tgi.server.http.errors import ApiError, internal_error, logged_refusal, validation_error
from tgi.server.service.generation import SequenceInput
from tgi.server.service.protocol import ServingEngine


def validated(engine: ServingEngine, given: SequenceInput) -> EngineRequest:
    """`given` checked by the engine (`LLMEngine.validate`): its refusals as 422s (the grammar's named by
    the request field that asked for it), a busy grammar compiler as a 503."""
    try:
        return engine.validate(given.prompt_token_ids, given.params, given.images, given.prediction)
    except UnusableGrammarError as exc:
        raise validation_error(str(exc), given.grammar_field) from None
    except ValidationError as exc:
        raise validation_error(str(exc), exc.param) from None
    except CompilerBusyError as exc:
        raise ApiError(503, f"Grammar compilation is busy: {exc}", "overloaded") from None


def api_error(exc: Exception) -> ApiError:
    """The answer to a generation that failed with `exc`: an `ApiError` as it is, a refusal as a 422, an
    engine's failure with its client message (details logged under a request id), anything else a 500."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationError):
        return validation_error(str(exc), exc.param)
    if isinstance(exc, EngineError):  # its client message is written to be shown (no raw exception text)
        shown = exc.client_message()
        if shown == str(exc):
            return ApiError(500, shown, "generation")
        return logged_refusal(500, shown, exc, "generation")  # the details under a request id, in the log
    return internal_error(exc)
