"""A Django project on MongoDB (django-mongodb-backend), for tests/test_django_mongodb.py."""
