import os

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from mongosched.contrib.django import get_app

from .testapp.tasks import add, multiply


def ping(request: HttpRequest) -> HttpResponse:
    return HttpResponse("pong")


def pid(request: HttpRequest) -> JsonResponse:
    """Which process served the request (the gunicorn tests)."""
    return JsonResponse({"pid": os.getpid()})


def schedule_add(request: HttpRequest) -> JsonResponse:
    job = add.schedule(int(request.GET["x"]), int(request.GET["y"]))
    return JsonResponse({"id": str(job.id)}, status=202)


def job_detail(request: HttpRequest, job_id: str) -> JsonResponse:
    job = get_app().get_job(job_id)
    if job is None:
        raise Http404(job_id)
    return JsonResponse({"task": job.task, "status": job.status.value, "result": job.result})


def enqueue_multiply(request: HttpRequest) -> JsonResponse:
    result = multiply.enqueue(int(request.GET["a"]), int(request.GET["b"]))
    return JsonResponse({"id": result.id, "status": str(result.status)}, status=202)


def result_detail(request: HttpRequest, result_id: str) -> JsonResponse:
    result = multiply.get_result(result_id)
    value = result.return_value if result.is_finished and not result.errors else None
    return JsonResponse({"status": str(result.status), "value": value})
